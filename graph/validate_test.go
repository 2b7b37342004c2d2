package graph

import (
	"cmp"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// problemsOf returns the problems joined in an error returned by New.
func problemsOf(t *testing.T, err error) []error {
	t.Helper()
	joined, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok, "New should return errors joined with errors.Join, got %T", err)
	return joined.Unwrap()
}

// childGraph is a child graph that Map and Child nodes can start: it completes once y is computed.
var childGraph = MustNew("c", "v1", []Node{
	Input("x"),
	Compute("y", Needs("x"), noopCompute),
}, CompletesWhen(Needs("y")))

func noopEach(Values) ([]map[string]any, error) { return nil, nil }

func TestNewValidation(t *testing.T) {
	t.Parallel()

	in := func(name string) Node { return Input(name) }
	comp := func(name string, gate Gate, opts ...NodeOption) Node {
		return Compute(name, gate, noopCompute, opts...)
	}

	tests := []struct {
		name    string
		graph   string // graph name; "g" when empty and noName is false
		noName  bool
		version string // "v1" when empty and noVer is false
		noVer   bool
		nodes   []Node
		opts    []Option
		want    string // the one problem expected, in full
	}{
		{
			name:   "empty graph name",
			noName: true,
			nodes:  []Node{in("a")},
			want:   `graph "": name is empty`,
		},
		{
			name:  "empty version",
			noVer: true,
			nodes: []Node{in("a")},
			want:  `graph "g": version is empty`,
		},
		{
			name: "no nodes",
			want: `graph "g": has no nodes`,
		},
		{
			name:  "empty node name",
			nodes: []Node{in("a"), in("")},
			want:  `graph "g": node #2: name is empty`,
		},
		{
			name:  "duplicate node name",
			nodes: []Node{in("a"), comp("a", Needs())},
			want:  `graph "g": node "a": name is already used by node #1`,
		},
		{
			name:  "reserved name execution_id",
			nodes: []Node{in("execution_id")},
			want:  `graph "g": node "execution_id": name is reserved`,
		},
		{
			name:  "reserved name last_updated_at",
			nodes: []Node{in("a"), comp("last_updated_at", Needs("a"))},
			want:  `graph "g": node "last_updated_at": name is reserved`,
		},
		{
			name:  "zero node",
			nodes: []Node{in("a"), {name: "z"}},
			want:  `graph "g": node "z": unknown kind Kind(0)`,
		},
		{
			name:  "nil gate",
			nodes: []Node{in("a"), comp("c", nil)},
			want:  `graph "g": node "c": gate is nil`,
		},
		{
			name: "gate names unknown node",
			nodes: []Node{
				in("name"), in("email"),
				comp("greeting", Needs("name", "emial")),
			},
			want: `graph "g": node "greeting": gate names unknown node "emial"`,
		},
		{
			name:  "unknown node nested in a gate",
			nodes: []Node{in("a"), comp("c", And(Needs("a"), Or(IsTrue("a"), Not(Provided("b")))))},
			want:  `graph "g": node "c": gate names unknown node "b"`,
		},
		{
			name:  "failed names a node that never fails",
			nodes: []Node{in("a"), comp("b", Needs("a")), comp("c", Or(Failed("b"), Not(Failed("a"))))},
			want:  `graph "g": node "c": gate: failed(a) names an input node, which never fails; Failed takes a compute, mutate or tick node`,
		},
		{
			name:  "nil gate inside and",
			nodes: []Node{in("a"), comp("c", And(Needs("a"), nil))},
			want:  `graph "g": node "c": gate: and() has a nil gate at position 2`,
		},
		{
			name:  "or with no gates",
			nodes: []Node{in("a"), comp("c", Or())},
			want:  `graph "g": node "c": gate: or() has no gates and would never hold`,
		},
		{
			name:  "not of nil",
			nodes: []Node{in("a"), comp("c", Not(nil))},
			want:  `graph "g": node "c": gate: not() has a nil gate`,
		},
		{
			name:  "when with nil predicate",
			nodes: []Node{in("a"), comp("c", Or(When("a", nil)))},
			want:  `graph "g": node "c": gate: when(a) has a nil predicate`,
		},
		{
			name:  "nil compute function",
			nodes: []Node{in("a"), Compute("c", Needs("a"), nil)},
			want:  `graph "g": node "c": compute function is nil`,
		},
		{
			name:  "nil mutate function",
			nodes: []Node{in("a"), Mutate("m", Needs("a"), nil, []string{"a"})},
			want:  `graph "g": node "m": mutate function is nil`,
		},
		{
			name:  "nil tick_once function",
			nodes: []Node{in("a"), TickOnce("t", Needs("a"), nil)},
			want:  `graph "g": node "t": tick_once function is nil`,
		},
		{
			name:  "nil tick_recurring function",
			nodes: []Node{in("a"), TickRecurring("t", Needs("a"), nil)},
			want:  `graph "g": node "t": tick_recurring function is nil`,
		},
		{
			name:  "cycle",
			nodes: []Node{in("a"), comp("c", Needs("a", "b")), comp("b", Needs("d")), comp("d", Needs("c"))},
			want:  `graph "g": node "c": gates form a cycle: "c" depends on "b", "b" depends on "d", "d" depends on "c"`,
		},
		{
			name:  "node gated on itself",
			nodes: []Node{in("a"), comp("c", Needs("a", "c"))},
			want:  `graph "g": node "c": gates form a cycle: "c" depends on "c"`,
		},
		{
			name:  "heartbeat interval not positive",
			nodes: []Node{in("a"), comp("c", Needs("a"), Heartbeat(0, time.Second))},
			want:  `graph "g": node "c": option Heartbeat interval 0s must be positive`,
		},
		{
			name:  "heartbeat timeout not positive",
			nodes: []Node{in("a"), comp("c", Needs("a"), Heartbeat(time.Second, -time.Second))},
			want:  `graph "g": node "c": option Heartbeat timeout -1s must be positive`,
		},
		{
			name:  "heartbeat interval more than half the timeout",
			nodes: []Node{in("a"), comp("c", Needs("a"), Heartbeat(16*time.Second, 30*time.Second))},
			want:  `graph "g": node "c": option Heartbeat interval 16s is more than half the timeout 30s`,
		},
		{
			name:  "max attempts not positive",
			nodes: []Node{in("a"), comp("c", Needs("a"), MaxAttempts(0))},
			want:  `graph "g": node "c": option MaxAttempts(0) must be at least 1`,
		},
		{
			name:  "abandon after not positive",
			nodes: []Node{in("a"), comp("c", Needs("a"), AbandonAfter(-time.Second))},
			want:  `graph "g": node "c": option AbandonAfter(-1s) must be positive`,
		},
		{
			name:  "max parallel not positive",
			nodes: []Node{in("a"), comp("c", Needs("a"), MaxParallel(0))},
			want:  `graph "g": node "c": option MaxParallel(0) must be at least 1`,
		},
		{
			name:  "rate limit not positive",
			nodes: []Node{in("a"), comp("c", Needs("a"), RateLimit(0, time.Second))},
			want:  `graph "g": node "c": option RateLimit(0, 1s) must allow at least 1 start; leave it out for no limit`,
		},
		{
			name:  "rate limit window not positive",
			nodes: []Node{in("a"), comp("c", Needs("a"), RateLimit(5, 0))},
			want:  `graph "g": node "c": option RateLimit(5, 0s) needs a window of at least 1ms`,
		},
		{
			name:  "rate limit window under a millisecond",
			nodes: []Node{in("a"), comp("c", Needs("a"), RateLimit(5, time.Microsecond))},
			want:  `graph "g": node "c": option RateLimit(5, 1µs) needs a window of at least 1ms`,
		},
		{
			name:  "rate key nil",
			nodes: []Node{in("a"), comp("c", Needs("a"), RateLimit(5, time.Second, RateKey(nil)))},
			want:  `graph "g": node "c": option RateLimit has a RateKey with a nil function`,
		},
		{
			name:  "rate limit on input",
			nodes: []Node{Input("a", RateLimit(5, time.Second))},
			want:  `graph "g": node "a": option RateLimit does not apply to input nodes, which accept only OnSave`,
		},
		{
			name:  "max entries not positive",
			nodes: []Node{in("a"), Historian("h", Needs("a"), MaxEntries(-1))},
			want:  `graph "g": node "h": option MaxEntries(-1) must be at least 1`,
		},
		{
			name:  "mutate without targets",
			nodes: []Node{in("a"), Mutate("m", Needs("a"), noopCompute, nil)},
			want:  `graph "g": node "m": mutate has no targets`,
		},
		{
			name:  "mutate with unknown target",
			nodes: []Node{in("a"), Mutate("m", Needs("a"), noopCompute, []string{"b"})},
			want:  `graph "g": node "m": target "b" is not a node of the graph`,
		},
		{
			name:  "mutate targets itself",
			nodes: []Node{in("a"), Mutate("m", Needs("a"), noopCompute, []string{"m"})},
			want:  `graph "g": node "m": mutate cannot target itself`,
		},
		{
			name:  "mutate targets a compute node",
			nodes: []Node{in("a"), comp("c", Needs("a")), Mutate("m", Needs("a"), noopCompute, []string{"c"})},
			want:  `graph "g": node "m": target "c" is a compute node; only input nodes can be mutated`,
		},
		{
			name:  "mutate lists a target twice",
			nodes: []Node{in("a"), in("b"), Mutate("m", Needs("a"), noopCompute, []string{"b", "b"})},
			want:  `graph "g": node "m": target "b" is listed more than once`,
		},
		{
			name: "update revision on change of a target upstream through gates",
			nodes: []Node{
				in("a"), in("b"),
				comp("c", Needs("a")),
				Mutate("m", Needs("c"), noopCompute, []string{"b", "a"}, UpdateRevisionOnChange()),
			},
			want: `graph "g": node "m": option UpdateRevisionOnChange with target "a", which is upstream of "m"`,
		},
		{
			name:  "update revision on change on a compute node",
			nodes: []Node{in("a"), comp("c", Needs("a"), UpdateRevisionOnChange())},
			want:  `graph "g": node "c": option UpdateRevisionOnChange applies only to mutate nodes, not to compute nodes`,
		},
		{
			name:  "max entries on a compute node",
			nodes: []Node{in("a"), comp("c", Needs("a"), MaxEntries(5))},
			want:  `graph "g": node "c": option MaxEntries applies only to historian nodes, not to compute nodes`,
		},
		{
			name:  "max attempts on an input",
			nodes: []Node{Input("a", MaxAttempts(2))},
			want:  `graph "g": node "a": option MaxAttempts does not apply to input nodes`,
		},
		{
			name:  "abandon after on an input",
			nodes: []Node{Input("a", AbandonAfter(time.Second))},
			want:  `graph "g": node "a": option AbandonAfter does not apply to input nodes`,
		},
		{
			name:  "heartbeat on an input",
			nodes: []Node{Input("a", Heartbeat(time.Second, 3*time.Second))},
			want:  `graph "g": node "a": option Heartbeat does not apply to input nodes`,
		},
		{
			name:  "backoff on an input",
			nodes: []Node{Input("a", Backoff(DefaultBackoff))},
			want:  `graph "g": node "a": option Backoff does not apply to input nodes`,
		},
		{
			name:  "concurrency key on an input",
			nodes: []Node{Input("a", ConcurrencyKey(func(Values) string { return "" }))},
			want:  `graph "g": node "a": option ConcurrencyKey does not apply to input nodes`,
		},
		{
			name:  "max parallel on an input",
			nodes: []Node{Input("a", MaxParallel(1))},
			want:  `graph "g": node "a": option MaxParallel does not apply to input nodes`,
		},
		{
			name:  "nil backoff",
			nodes: []Node{in("a"), comp("c", Needs("a"), Backoff(nil))},
			want:  `graph "g": node "c": option Backoff has a nil function`,
		},
		{
			name:  "nil on save",
			nodes: []Node{Input("a", OnSave(nil))},
			want:  `graph "g": node "a": option OnSave has a nil function`,
		},
		{
			name:  "nil concurrency key",
			nodes: []Node{in("a"), comp("c", Needs("a"), ConcurrencyKey(nil))},
			want:  `graph "g": node "c": option ConcurrencyKey has a nil function`,
		},
		{
			name:  "completes when names unknown node",
			nodes: []Node{in("a")},
			opts:  []Option{CompletesWhen(And(Needs("a"), Provided("done")))},
			want:  `graph "g": option CompletesWhen: gate names unknown node "done"`,
		},
		{
			name:  "completes when nil",
			nodes: []Node{in("a")},
			opts:  []Option{CompletesWhen(nil)},
			want:  `graph "g": option CompletesWhen has a nil gate`,
		},
		{
			name:  "graph on save nil",
			nodes: []Node{in("a")},
			opts:  []Option{WithOnSave(nil)},
			want:  `graph "g": option WithOnSave has a nil function`,
		},
		{
			name:  "id prefix empty",
			nodes: []Node{in("a")},
			opts:  []Option{IDPrefix("")},
			want:  `graph "g": option IDPrefix("") must be 1 to 16 characters`,
		},
		{
			name:  "id prefix too long",
			nodes: []Node{in("a")},
			opts:  []Option{IDPrefix(strings.Repeat("A", 17))},
			want:  `graph "g": option IDPrefix("AAAAAAAAAAAAAAAAA") must be 1 to 16 characters`,
		},
		{
			name:  "map without a child graph",
			nodes: []Node{in("a"), Map("m", Needs("a"), nil, noopEach)},
			want:  `graph "g": node "m": Map child graph is nil`,
		},
		{
			name:  "map of a child that never completes",
			nodes: []Node{in("a"), Map("m", Needs("a"), MustNew("c", "v1", []Node{in("x")}), noopEach)},
			want:  `graph "g": node "m": Map child graph "c" has no CompletesWhen`,
		},
		{
			name:  "child without a function",
			nodes: []Node{in("a"), Child("m", Needs("a"), childGraph, nil)},
			want:  `graph "g": node "m": Child function is nil`,
		},
		{
			name:  "result not in the child",
			nodes: []Node{in("a"), Map("m", Needs("a"), childGraph, noopEach, Result("nope"))},
			want:  `graph "g": node "m": option Result("nope") names no node of the child graph "c"`,
		},
		{
			name:  "result on a compute node",
			nodes: []Node{in("a"), comp("b", Needs("a"), CollectFailures())},
			want:  `graph "g": node "b": option CollectFailures applies only to Map and Child nodes, not to compute nodes`,
		},
		{
			name:  "id prefix with a dash",
			nodes: []Node{in("a")},
			opts:  []Option{IDPrefix("ON-B")},
			want:  `graph "g": option IDPrefix("ON-B") must be 1 to 16 characters`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			name, version := tt.graph, tt.version
			if name == "" && !tt.noName {
				name = "g"
			}
			if version == "" && !tt.noVer {
				version = "v1"
			}
			g, err := New(name, version, tt.nodes, tt.opts...)
			require.Error(t, err)
			require.Nil(t, g)
			require.ErrorIs(t, err, ErrInvalidGraph)
			problems := problemsOf(t, err)
			require.Len(t, problems, 1, "problems: %v", err)
			require.Contains(t, problems[0].Error(), tt.want)
			require.ErrorIs(t, problems[0], ErrInvalidGraph)
		})
	}
}

// Names and versions are stored as PostgreSQL text, and every write of a replica lists the names
// it serves: New refuses one that the database cannot hold, or that logs cannot show, and says
// which rule it breaks.
func TestNewChecksNames(t *testing.T) {
	t.Parallel()

	long := strings.Repeat("n", 256)
	tests := []struct {
		name           string
		graph, version string
		node           string
		want           string // the one problem expected
	}{
		{
			name:  "graph name with a NUL",
			graph: "on\x00board",
			want:  `graph "on\x00board": name holds a NUL character (byte 2); names are valid UTF-8 with no control characters`,
		},
		{
			name:  "graph name not UTF-8",
			graph: "caf\xe9",
			want:  `graph "caf\xe9": name is not valid UTF-8 (byte 3 is 0xe9)`,
		},
		{
			name:  "graph name too long",
			graph: long,
			want:  `graph "` + long[:40] + `"…: name is 256 bytes long, over the limit of 255`,
		},
		{
			name:    "version with a NUL",
			version: "v\x001",
			want:    `graph "g": version holds a NUL character (byte 1)`,
		},
		{
			name:    "version not UTF-8",
			version: "v\xff",
			want:    `graph "g": version is not valid UTF-8 (byte 1 is 0xff)`,
		},
		{
			name:    "version with a newline",
			version: "v1\n",
			want:    `graph "g": version holds the control character U+000A (byte 2)`,
		},
		{
			name:    "version too long",
			version: long,
			want:    `graph "g": version is 256 bytes long, over the limit of 255`,
		},
		{
			name: "node name with a NUL",
			node: "na\x00me",
			want: `graph "g": node "na\x00me": name holds a NUL character (byte 2)`,
		},
		{
			name: "node name not UTF-8",
			node: "\xc3(",
			want: `graph "g": node "\xc3(": name is not valid UTF-8 (byte 0 is 0xc3)`,
		},
		{
			name: "node name with a tab",
			node: "first\tname",
			want: `graph "g": node "first\tname": name holds the control character U+0009 (byte 5)`,
		},
		{
			name: "node name with a C1 control",
			node: "name\u0085",
			want: `graph "g": node "name\u0085": name holds the control character U+0085 (byte 4)`,
		},
		{
			name: "node name too long",
			node: long,
			want: `graph "g": node "` + long[:40] + `"…: name is 256 bytes long, over the limit of 255`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			name, version, node := cmp.Or(tt.graph, "g"), cmp.Or(tt.version, "v1"), cmp.Or(tt.node, "a")
			g, err := New(name, version, []Node{Input(node)})
			require.Nil(t, g)
			require.ErrorIs(t, err, ErrInvalidGraph)
			problems := problemsOf(t, err)
			require.Len(t, problems, 1, "problems: %v", err)
			require.Contains(t, problems[0].Error(), tt.want)
		})
	}

	// At the limit, and beyond ASCII, a name is fine.
	limit := strings.Repeat("é", 127) + "n" // 255 bytes
	g, err := New(limit, limit, []Node{Input(limit), Compute("größe", Needs(limit), noopCompute), Input("名前")})
	require.NoError(t, err)
	require.Equal(t, limit, g.Name())
}

func TestNewReportsEveryProblem(t *testing.T) {
	t.Parallel()

	_, err := New("onboarding", "v1", []Node{
		Input("name"),
		Input("email", MaxAttempts(2)),
		Compute("greeting", Needs("name", "emial"), noopCompute),
		Compute("greeting", Needs("name"), noopCompute),
		Mutate("fix", Needs("name"), noopCompute, []string{"fix"}),
		Compute("loop", Needs("loop"), nil),
	}, IDPrefix("no way"))
	require.ErrorIs(t, err, ErrInvalidGraph)

	want := []string{
		`graph "onboarding": node "email": option MaxAttempts does not apply to input nodes`,
		`graph "onboarding": node "greeting": gate names unknown node "emial"`,
		`graph "onboarding": node "greeting": name is already used by node #3`,
		`graph "onboarding": node "fix": mutate cannot target itself`,
		`graph "onboarding": node "loop": compute function is nil`,
		`graph "onboarding": node "loop": gates form a cycle: "loop" depends on "loop"`,
		`graph "onboarding": option IDPrefix("no way") must be 1 to 16 characters`,
	}
	problems := problemsOf(t, err)
	require.Len(t, problems, len(want), "problems: %v", err)
	for _, w := range want {
		require.Contains(t, err.Error(), w)
	}
	// One problem per line, so the error reads as a list.
	require.Len(t, strings.Split(err.Error(), "\n"), len(want))
}

func TestNewAcceptsValidGraphs(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		nodes []Node
		opts  []Option
	}{
		{
			name: "every kind",
			nodes: []Node{
				Input("a", OnSave(noopOnSave)),
				Compute("c", Needs("a"), noopCompute, MaxAttempts(1), AbandonAfter(time.Second),
					Heartbeat(time.Second, 2*time.Second), Backoff(DefaultBackoff), OnSave(noopOnSave),
					ConcurrencyKey(func(Values) string { return "k" }), MaxParallel(2)),
				Mutate("m", Needs("c"), noopCompute, []string{"a"}),
				TickOnce("t1", Needs(), noopTick),
				TickRecurring("t2", Needs("t1"), noopTick),
				Historian("h", Needs("a", "c"), MaxEntries(10)),
				Archive("arch", Needs("t2")),
			},
			opts: []Option{WithOnSave(noopOnSave), IDPrefix("A_1"), CompletesWhen(Needs("c"))},
		},
		{
			// Journey's "useless machine": a mutate writes back into the input it is gated on.
			name: "mutate targets its own upstream",
			nodes: []Node{
				Input("switch"),
				Mutate("paddle", When("switch", func(v Value) bool { return v.String() == "on" }),
					noopCompute, []string{"switch"}),
			},
		},
		{
			name: "update revision on change of a target not upstream",
			nodes: []Node{
				Input("a"), Input("b"),
				Mutate("m", Needs("a"), noopCompute, []string{"b"}, UpdateRevisionOnChange()),
				Compute("c", Needs("b"), noopCompute),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			g, err := New("g", "v1", tt.nodes, tt.opts...)
			require.NoError(t, err)
			require.Len(t, g.Nodes(), len(tt.nodes))
		})
	}
}

func TestMustNew(t *testing.T) {
	t.Parallel()

	require.NotPanics(t, func() { MustNew("g", "v1", []Node{Input("a")}) })
	require.PanicsWithError(t, `graph "g": has no nodes`, func() { MustNew("g", "v1", nil) })

	defer func() {
		r := recover()
		err, ok := r.(error)
		require.True(t, ok, "MustNew should panic with an error, got %#v", r)
		require.True(t, errors.Is(err, ErrInvalidGraph))
	}()
	MustNew("g", "", []Node{Input("a")})
}
