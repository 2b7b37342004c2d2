package graph

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGates(t *testing.T) {
	t.Parallel()

	adult := func(v Value) bool { return v.IsSet() && v.Int() >= 18 }
	unset := func(v Value) bool { return !v.IsSet() }

	type row struct {
		vals      map[string]any
		holds     bool
		wantUnmet string // checked when not empty
	}
	tests := []struct {
		name   string
		gate   Gate
		str    string
		nodes  []string
		truths []row
	}{
		{
			name:  "needs",
			gate:  Needs("name", "email"),
			str:   "needs(name, email)",
			nodes: []string{"name", "email"},
			truths: []row{
				{vals: nil, holds: false, wantUnmet: `needs "name"; needs "email"`},
				{vals: map[string]any{"name": "Mario"}, holds: false, wantUnmet: `needs "email"`},
				{vals: map[string]any{"email": "m@x"}, holds: false, wantUnmet: `needs "name"`},
				{vals: map[string]any{"name": "Mario", "email": "m@x"}, holds: true},
				{vals: map[string]any{"name": nil, "email": false}, holds: true},
			},
		},
		{
			name:  "failed",
			gate:  Or(Failed("charge"), Needs("paid")),
			str:   "or(failed(charge), needs(paid))",
			nodes: []string{"charge", "paid"},
			truths: []row{
				{vals: nil, holds: false, wantUnmet: `one of: (needs "charge" to fail) or (needs "paid")`},
				{vals: map[string]any{"charge": 10}, holds: false},
				{vals: map[string]any{"paid": true}, holds: true},
			},
		},
		{
			name:  "needs nothing",
			gate:  Needs(),
			str:   "needs()",
			nodes: nil,
			truths: []row{
				{vals: nil, holds: true},
				{vals: map[string]any{"a": 1}, holds: true},
			},
		},
		{
			name:  "and",
			gate:  And(Needs("a"), IsTrue("b")),
			str:   "and(needs(a), is_true(b))",
			nodes: []string{"a", "b"},
			truths: []row{
				{vals: nil, holds: false, wantUnmet: `needs "a"; needs "b"`},
				{vals: map[string]any{"a": 1}, holds: false, wantUnmet: `needs "b"`},
				{vals: map[string]any{"a": 1, "b": false}, holds: false, wantUnmet: `"b" is not true`},
				{vals: map[string]any{"b": true}, holds: false, wantUnmet: `needs "a"`},
				{vals: map[string]any{"a": 1, "b": true}, holds: true},
			},
		},
		{
			name:   "and of nothing",
			gate:   And(),
			str:    "and()",
			nodes:  nil,
			truths: []row{{vals: nil, holds: true}},
		},
		{
			name:  "or",
			gate:  Or(Provided("a"), Provided("b")),
			str:   "or(provided(a), provided(b))",
			nodes: []string{"a", "b"},
			truths: []row{
				{vals: nil, holds: false, wantUnmet: `one of: (needs "a") or (needs "b")`},
				{vals: map[string]any{"a": 1}, holds: true},
				{vals: map[string]any{"b": 1}, holds: true},
				{vals: map[string]any{"a": 1, "b": 2}, holds: true},
			},
		},
		{
			name:  "or of nothing",
			gate:  Or(),
			str:   "or()",
			nodes: nil,
			truths: []row{
				{vals: map[string]any{"a": 1}, holds: false, wantUnmet: "or() with no gates never holds"},
			},
		},
		{
			name:  "not",
			gate:  Not(Provided("flag")),
			str:   "not(provided(flag))",
			nodes: []string{"flag"},
			truths: []row{
				{vals: nil, holds: true},
				{vals: map[string]any{"other": 1}, holds: true},
				{vals: map[string]any{"flag": false}, holds: false, wantUnmet: `not (provided "flag")`},
			},
		},
		{
			name:  "provided",
			gate:  Provided("x"),
			str:   "provided(x)",
			nodes: []string{"x"},
			truths: []row{
				{vals: nil, holds: false, wantUnmet: `needs "x"`},
				{vals: map[string]any{"x": ""}, holds: true},
				{vals: map[string]any{"x": nil}, holds: true},
			},
		},
		{
			name:  "is true",
			gate:  IsTrue("x"),
			str:   "is_true(x)",
			nodes: []string{"x"},
			truths: []row{
				{vals: nil, holds: false, wantUnmet: `needs "x"`},
				{vals: map[string]any{"x": true}, holds: true},
				{vals: map[string]any{"x": false}, holds: false, wantUnmet: `"x" is not true`},
				{vals: map[string]any{"x": "true"}, holds: false, wantUnmet: `"x" is not true`},
				{vals: map[string]any{"x": 1}, holds: false, wantUnmet: `"x" is not true`},
			},
		},
		{
			name:  "is false",
			gate:  IsFalse("x"),
			str:   "is_false(x)",
			nodes: []string{"x"},
			truths: []row{
				{vals: nil, holds: false, wantUnmet: `needs "x"`},
				{vals: map[string]any{"x": false}, holds: true},
				{vals: map[string]any{"x": true}, holds: false, wantUnmet: `"x" is not false`},
				{vals: map[string]any{"x": 0}, holds: false, wantUnmet: `"x" is not false`},
				{vals: map[string]any{"x": nil}, holds: false, wantUnmet: `"x" is not false`},
			},
		},
		{
			name:  "when",
			gate:  When("age", adult),
			str:   "when(age)",
			nodes: []string{"age"},
			truths: []row{
				{vals: nil, holds: false, wantUnmet: `"age" does not satisfy predicate`},
				{vals: map[string]any{"age": 17}, holds: false, wantUnmet: `"age" does not satisfy predicate`},
				{vals: map[string]any{"age": 18}, holds: true},
			},
		},
		{
			name:  "when sees an unset value",
			gate:  When("x", unset),
			str:   "when(x)",
			nodes: []string{"x"},
			truths: []row{
				{vals: nil, holds: true},
				{vals: map[string]any{"x": 1}, holds: false, wantUnmet: `"x" does not satisfy predicate`},
			},
		},
		{
			name: "nested",
			gate: And(
				Needs("email"),
				Or(IsTrue("subscribed"), When("age", adult)),
				Not(And(Provided("banned"), IsTrue("banned"))),
			),
			str:   "and(needs(email), or(is_true(subscribed), when(age)), not(and(provided(banned), is_true(banned))))",
			nodes: []string{"email", "subscribed", "age", "banned", "banned"},
			truths: []row{
				{
					vals:      nil,
					holds:     false,
					wantUnmet: `needs "email"; one of: (needs "subscribed") or ("age" does not satisfy predicate)`,
				},
				{vals: map[string]any{"email": "e", "subscribed": true}, holds: true},
				{vals: map[string]any{"email": "e", "age": 30}, holds: true},
				{vals: map[string]any{"email": "e", "age": 30, "banned": false}, holds: true},
				{
					vals:      map[string]any{"email": "e", "age": 30, "banned": true},
					holds:     false,
					wantUnmet: `not ((provided "banned") and ("banned" is true))`,
				},
				{
					vals:      map[string]any{"email": "e", "subscribed": false, "age": 3},
					holds:     false,
					wantUnmet: `one of: ("subscribed" is not true) or ("age" does not satisfy predicate)`,
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			require.Equal(t, tt.str, tt.gate.String())
			require.Equal(t, tt.nodes, tt.gate.Nodes())
			for _, r := range tt.truths {
				vals := valuesOf(t, r.vals)
				require.Equal(t, r.holds, tt.gate.Holds(vals), "Holds(%v)", r.vals)
				unmet := tt.gate.Unmet(vals)
				if r.holds {
					require.Empty(t, unmet, "Unmet(%v)", r.vals)
				} else {
					require.NotEmpty(t, unmet, "Unmet(%v)", r.vals)
				}
				if r.wantUnmet != "" {
					require.Equal(t, r.wantUnmet, unmet, "Unmet(%v)", r.vals)
				}
			}
		})
	}
}

// Failed holds on a failure, with or without a value kept from an earlier success; Not(Failed)
// says what it rejects.
func TestFailedGate(t *testing.T) {
	t.Parallel()
	g := Failed("charge")
	require.False(t, g.Holds(Values{"charge": {Raw: []byte(`1`)}}))
	require.True(t, g.Holds(Values{"charge": {Failed: true, Error: "declined"}}))
	require.True(t, g.Holds(Values{"charge": {Raw: []byte(`1`), Failed: true}}))
	require.False(t, Values{"charge": {Failed: true}}.Has("charge"), "a failure is no value")
	require.Equal(t, `not ("charge" failed)`, Not(g).Unmet(Values{"charge": {Failed: true}}))
}

func TestGateTreatsUnsetValueAsNotProvided(t *testing.T) {
	t.Parallel()

	vals := Values{"a": Value{Revision: 3}} // present, but Raw is nil
	require.False(t, Needs("a").Holds(vals))
	require.False(t, Provided("a").Holds(vals))
	require.True(t, Not(Provided("a")).Holds(vals))
	require.False(t, IsFalse("a").Holds(vals))
}

func TestGatesCopyTheirArguments(t *testing.T) {
	t.Parallel()

	names := []string{"a", "b"}
	g := Needs(names...)
	names[0] = "z"
	require.Equal(t, []string{"a", "b"}, g.Nodes())

	got := g.Nodes()
	got[1] = "z"
	require.Equal(t, []string{"a", "b"}, g.Nodes())

	gates := []Gate{Provided("a"), Provided("b")}
	or := Or(gates...)
	gates[0] = Provided("z")
	require.Equal(t, "or(provided(a), provided(b))", or.String())
}

// customGate is a gate defined outside the package's own constructors.
type customGate struct{ holds bool }

func (g customGate) Holds(Values) bool { return g.holds }
func (g customGate) Nodes() []string   { return []string{"c"} }
func (g customGate) String() string    { return "custom()" }
func (g customGate) Unmet(Values) string {
	if g.holds {
		return ""
	}
	return "custom is unmet"
}

func TestNotDescribesWhatItRejects(t *testing.T) {
	t.Parallel()

	always := func(Value) bool { return true }
	tests := []struct {
		gate Gate
		want string
	}{
		{gate: Not(Needs("a", "b")), want: `not (needs "a", "b")`},
		{gate: Not(Needs()), want: `not (needs nothing)`},
		{gate: Not(Or(Provided("a"), IsFalse("b"))), want: `not ((provided "a") or ("b" is false))`},
		{gate: Not(Not(Provided("z"))), want: `not (not (provided "z"))`},
		{gate: Not(When("a", always)), want: `not ("a" satisfies predicate)`},
		{gate: Not(customGate{holds: true}), want: `not (custom())`},
	}
	vals := valuesOf(t, map[string]any{"a": 1, "b": false})
	for _, tt := range tests {
		t.Run(tt.gate.String(), func(t *testing.T) {
			t.Parallel()

			require.False(t, tt.gate.Holds(vals))
			require.Equal(t, tt.want, tt.gate.Unmet(vals))
		})
	}
}

func TestGatesWithCustomAndNilParts(t *testing.T) {
	t.Parallel()

	vals := valuesOf(t, map[string]any{"a": 1})

	g := And(Needs("a"), customGate{holds: false})
	require.False(t, g.Holds(vals))
	require.Equal(t, "custom is unmet", g.Unmet(vals))
	require.Equal(t, []string{"a", "c"}, g.Nodes())
	require.Equal(t, "and(needs(a), custom())", g.String())
	require.True(t, Or(customGate{holds: true}, Needs("b")).Holds(vals))

	// Gates with nil parts are rejected by New; until then they do not hold, and do not panic.
	for _, g := range []Gate{And(Needs("a"), nil), Or(nil), Not(nil), When("a", nil)} {
		require.False(t, g.Holds(vals), g.String())
		require.NotEmpty(t, g.Unmet(vals), g.String())
		require.NotPanics(t, func() { g.Nodes() }, g.String())
	}
	require.Equal(t, "and(needs(a), <nil>)", And(Needs("a"), nil).String())
	require.Equal(t, "not(<nil>)", Not(nil).String())
	require.Equal(t, "one of: (<nil gate>)", Or(nil).Unmet(vals))
}
