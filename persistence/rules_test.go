package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
)

// The rules of a write, with no database: rows in, the state the rules leave out. The state is
// the plan that apply writes: each node row changed (at the revision of its last change), the
// history of values, the attempts replaced, the events claimed, what to announce.

var ruleNow = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// noop is the function of the rules' compute nodes, which the rules never call.
func noop(context.Context, graph.Values) (any, error) { return nil, nil }

// row is a node row, written compactly: "name=\"ada\"@1" is a value set at revision 1; after it,
// or alone, "RUNNING#2{a:4}/tok" is the current attempt: its state, its number, the upstream
// revisions it computes with, and its claim token. The row's revision is its last change's.
func row(t *testing.T, g *graph.Graph, spec string) *nodeRow {
	t.Helper()
	node, rest, _ := strings.Cut(spec, " ")
	r := &nodeRow{Lane: 3, ExecutionID: "E1", GraphKey: GraphKey(g.Name(), g.Version()), ChangedAt: ruleNow.Add(-time.Hour)}
	if name, value, ok := strings.Cut(node, "="); ok {
		raw, rev, _ := strings.Cut(value, "@")
		var n int64
		_, err := fmt.Sscan(rev, &n)
		require.NoError(t, err, spec)
		r.Node, r.Value, r.Rev = name, json.RawMessage(raw), n
		r.ValueRev, r.SetAt = pgtype.Int8{Int64: n, Valid: true}, pgtype.Timestamptz{Time: r.ChangedAt, Valid: true}
	} else {
		r.Node = node
	}
	if rest = strings.TrimSpace(rest); rest != "" {
		state, more, _ := strings.Cut(rest, "#")
		number, more, _ := strings.Cut(more, "{")
		sig, token, _ := strings.Cut(more, "}")
		var attempt int32
		_, err := fmt.Sscan(number, &attempt)
		require.NoError(t, err, spec)
		computed := signature{}
		for _, kv := range strings.Split(sig, ",") {
			if k, v, ok := strings.Cut(kv, ":"); ok {
				var n int64
				_, err := fmt.Sscan(v, &n)
				require.NoError(t, err, spec)
				computed[k] = n
			}
		}
		n, _ := g.Node(r.Node)
		set := n.Settings()
		at := pgtype.Timestamptz{Time: r.ChangedAt, Valid: true}
		r.AttemptID = pgtype.Int8{Int64: int64(len(r.Node)*100) + int64(attempt), Valid: true}
		r.State, r.ComputedWith = pgtype.Text{String: state, Valid: true}, pgtype.Text{String: computed.String(), Valid: true}
		r.Attempt, r.MaxAttempts = pgtype.Int4{Int32: attempt, Valid: true}, pgtype.Int4{Int32: int32(set.MaxAttempts), Valid: true}
		r.RunAt, r.CreatedAt = at, at
		r.AbandonAfterMS = pgtype.Int8{Int64: set.AbandonAfter.Milliseconds(), Valid: true}
		r.HeartbeatTimeoutMS = pgtype.Int8{Int64: set.HeartbeatTimeout.Milliseconds(), Valid: true}
		if token = strings.TrimPrefix(token, "/"); token != "" {
			r.ClaimToken, r.ReplicaID = pgtype.Text{String: token, Valid: true}, pgtype.Text{String: "r1", Valid: true}
		}
		for _, v := range computed {
			r.Rev = max(r.Rev, v+1)
		}
	}
	return r
}

// loaded is an execution of g as load leaves it, from rows.
func loaded(t *testing.T, g *graph.Graph, specs ...string) *execState {
	t.Helper()
	rows := make([]*nodeRow, len(specs))
	for i, spec := range specs {
		rows[i] = row(t, g, spec)
		if rows[i].ValueRev.Valid {
			rows[i].Hseq = int64(i + 1) // the values' places in the history: in the order given
		}
	}
	e := Execution{ID: "E1", Lane: 3, GraphName: g.Name(), GraphVersion: g.Version(), CreatedAt: ruleNow.Add(-time.Hour)}
	return newState(e, g, ruleNow, rows)
}

// plan describes what st changed, compactly: each node row changed, at its revision, with its
// value and current attempt; the history entries; the attempts replaced; the events claimed.
func plan(st *execState) []string {
	var out []string
	for _, node := range st.changedNodes() {
		line := fmt.Sprintf("row %s @%d", node, st.marks[node].rev)
		if v, ok := st.values[node]; ok {
			line += fmt.Sprintf(" =%s@%d", v.Raw, v.Revision)
		}
		if c := st.latest[node]; c != nil {
			line += fmt.Sprintf(" %s#%d%s", c.State, c.Attempt, c.ComputedWith)
			if c.State == StatePending {
				line += " at+" + c.RunAt.Sub(st.now).String()
			}
		}
		out = append(out, line)
	}
	for _, h := range st.history {
		out = append(out, fmt.Sprintf("history %s =%s@%d", h.Node, h.Value, h.Revision))
	}
	for _, c := range st.superseded {
		out = append(out, fmt.Sprintf("replaced %s %s#%d", c.Node, c.State, c.Attempt))
	}
	for _, e := range st.events {
		out = append(out, "claim "+e.Event)
	}
	return out
}

// 1. A Set makes the first attempt: the value at the next revision, and the attempt of the node
// it completes, computed with both inputs; work and a change to announce.
func TestRuleASetMakesTheFirstAttempt(t *testing.T) {
	g := graph.MustNew("greet", "v1", []graph.Node{
		graph.Input("name"), graph.Input("email"),
		graph.Compute("greeting", graph.Needs("name", "email"), noop),
	})
	st := loaded(t, g, `name="ada"@1`)
	rev, err := st.setValues(Setting{ID: "E1", Set: map[string]json.RawMessage{"email": json.RawMessage(`"ada@example.com"`)}})
	require.NoError(t, err)
	require.Equal(t, int64(2), rev)
	require.Equal(t, []string{
		`row email @2 ="ada@example.com"@2`,
		`row greeting @2 AVAILABLE#1{"email":2,"name":1}`,
	}, plan(st))
	require.True(t, st.work, "work to announce")
	require.True(t, st.changed, "a change to announce")

	// The same value again changes nothing.
	st = loaded(t, g, `name="ada"@1`, `email={"a":1,"b":[1.0]}@2`)
	rev, err = st.setValues(Setting{ID: "E1", Set: map[string]json.RawMessage{"email": json.RawMessage(`{ "b": [1], "a": 1 }`)}})
	require.NoError(t, err)
	require.Equal(t, int64(2), rev, "jsonb's equality: keys in any order, 1.0 is 1")
	require.Empty(t, plan(st))
}

// 2. Siblings in one batch: an outcome equal to the value keeps the value's revision; a new one
// takes the next revision; the node downstream of both gets one new attempt, computed with both;
// an outcome under a token that is no longer the claim's is refused, and changes nothing.
func TestRuleSiblingsInOneBatch(t *testing.T) {
	g := graph.MustNew("siblings", "v1", []graph.Node{
		graph.Input("a"),
		graph.Compute("b", graph.Needs("a"), noop),
		graph.Compute("c", graph.Needs("a"), noop),
		graph.Compute("d", graph.Needs("b", "c"), noop),
	})
	st := loaded(t, g, `a=2@5`, `b=10@2 RUNNING#2{a:5}/tb`, `c=20@3 RUNNING#2{a:5}/tc`, `d=30@4 SUCCESS#1{b:2,c:3}`)
	require.Equal(t, int64(6), st.revision)
	b, c := st.latest["b"], st.latest["c"]
	old := *c
	stale := "t-old"
	old.ClaimToken = &stale
	require.False(t, st.holdsClaim(&old), "the old token's outcome is refused")

	for _, o := range []Outcome{
		{C: b, Result: json.RawMessage(`10`), Used: map[string]int64{"a": 5}},
		{C: c, Result: json.RawMessage(`21`), Used: map[string]int64{"a": 5}},
	} {
		require.True(t, st.holdsClaim(o.C))
		require.NoError(t, st.recordOne(o))
	}
	require.Equal(t, []string{
		`row b @7 =10@2 SUCCESS#2{"a":5}`,
		`row c @8 =21@8 SUCCESS#2{"a":5}`,
		`row d @8 =30@4 AVAILABLE#1{"b":2,"c":8}`,
		`history c =20@3`,
		`replaced d SUCCESS#1`,
	}, plan(st))
	require.False(t, st.holdsClaim(c), "a recorded outcome holds its claim no more")
}

// 3. Retry, then fail: the first failure makes attempt #2 PENDING for the backoff, the first in
// the attempts' history; the second fails the node, and claims the execution's failure.
func TestRuleRetryThenFail(t *testing.T) {
	g := graph.MustNew("retry", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("n", graph.Needs("x"), noop, graph.MaxAttempts(2),
			graph.Backoff(func(int) time.Duration { return 30 * time.Second })),
	})
	st := loaded(t, g, `x=1@1`, `n RUNNING#1{x:1}/t1`)
	require.NoError(t, st.recordOne(Outcome{C: st.latest["n"], Err: errors.New("boom")}))
	require.Equal(t, []string{
		`row n @3 PENDING#2{"x":1} at+30s`,
		`replaced n FAILED#1`,
	}, plan(st))

	st = loaded(t, g, `x=1@1`, `n RUNNING#2{x:1}/t2`)
	require.NoError(t, st.recordOne(Outcome{C: st.latest["n"], Err: errors.New("boom again")}))
	require.Equal(t, []string{
		`row n @3 FAILED#2{"x":1}`,
		`claim ` + EventFailed,
	}, plan(st))
	require.Equal(t, "boom again", *st.latest["n"].Error)
}

// A compensation gated on Failed runs once its node fails for good, and sees the failure; a
// Retry clears its value, as a gate that stops holding does; a second failure runs it again.
func TestRuleFailedGatesACompensation(t *testing.T) {
	var seen graph.Values
	g := graph.MustNew("compensate", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("charge", graph.Needs("x"), noop, graph.MaxAttempts(1)),
		graph.Compute("restock", graph.Failed("charge"), noop),
		graph.Compute("watch", graph.When("charge", func(v graph.Value) bool { seen = graph.Values{"charge": v}; return false }), noop),
	})
	st := loaded(t, g, `x=1@1`, `charge RUNNING#1{x:1}/t1`)
	require.NoError(t, st.recordOne(Outcome{C: st.latest["charge"], Err: errors.New("card declined")}))
	require.Equal(t, []string{
		`row charge @3 FAILED#1{"x":1}`,
		`row restock @3 AVAILABLE#1{}`,
		`claim ` + EventFailed,
	}, plan(st))
	require.Equal(t, graph.Value{Failed: true, Error: "card declined"}, seen["charge"], "gates see the failure")
	require.False(t, st.values.Has("charge"), "and it is no value")

	// The compensation's value stays: its gate holds, and it ran with what it reads.
	st = loaded(t, g, `x=1@1`, `charge FAILED#1{x:1}`, `restock RUNNING#1/t2`)
	require.NoError(t, st.recordOne(Outcome{C: st.latest["restock"], Result: json.RawMessage(`"restocked"`), Used: map[string]int64{}}))
	require.Equal(t, []string{`row restock @3 ="restocked"@3 SUCCESS#1{}`}, plan(st))

	// Retry: the gate stops holding, the value is cleared.
	st = loaded(t, g, `x=1@1`, `charge FAILED#1{x:1}`, `restock="restocked"@3 SUCCESS#1`)
	require.NoError(t, st.retry("charge"))
	require.Equal(t, []string{
		`row charge @4 AVAILABLE#1{"x":1}`,
		`row restock @5 SUCCESS#1{}`,
		`history restock ="restocked"@3`, `history restock =@5`,
		`replaced charge FAILED#1`,
	}, plan(st))

	// It fails again: the compensation runs again.
	st = loaded(t, g, `x=1@1`, `charge RUNNING#1{x:1}/t3`, `restock SUCCESS#1`)
	require.NoError(t, st.recordOne(Outcome{C: st.latest["charge"], Err: graph.Permanent(errors.New("card declined again"))}))
	require.Equal(t, []string{
		`row charge @3 FAILED#1{"x":1}`,
		`row restock @3 AVAILABLE#1{}`,
		`replaced restock SUCCESS#1`,
		`claim ` + EventFailed,
	}, plan(st))
}

// Pause parks the waiting attempts as PAUSED (a gated AVAILABLE one frees its slot); a Set while
// paused makes its attempt PAUSED; Resume makes each ready again as it would have been, keeping
// its run_at; a canceled execution is neither paused nor resumed.
func TestRulePauseAndResume(t *testing.T) {
	g := graph.MustNew("pause", "v1", []graph.Node{
		graph.Input("x"), graph.Input("w"),
		graph.Compute("y", graph.Needs("x"), noop, graph.ConcurrencyKey(func(graph.Values) string { return "k" })),
		graph.Compute("z", graph.Needs("x"), noop),
		graph.Compute("v", graph.Needs("w"), noop),
	})
	key := "k"
	st := loaded(t, g, `x=1@1`, `y AVAILABLE#1{x:1}`, `z AVAILABLE#1{x:1}`)
	st.latest["y"].ConcurrencyKey = &key
	ok, err := st.pause(true)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{`row y @3 PAUSED#1{"x":1}`, `row z @3 PAUSED#1{"x":1}`}, plan(st))
	require.True(t, st.promote, "y's slot is free")
	require.False(t, st.work)
	_, err = st.setValues(Setting{ID: "E1", Set: map[string]json.RawMessage{"w": json.RawMessage(`2`)}})
	require.NoError(t, err)
	require.Equal(t, StatePaused, st.latest["v"].State, "what a write makes while paused waits")
	require.False(t, st.work)

	st = loaded(t, g, `x=1@1`, `y PAUSED#1{x:1}`, `z PAUSED#1{x:1}`)
	st.latest["y"].ConcurrencyKey = &key
	st.exec.PausedAt = &ruleNow
	ok, err = st.pause(false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{`row y @3 PENDING#1{"x":1} at+-1h0m0s`, `row z @3 AVAILABLE#1{"x":1}`}, plan(st),
		"gated y waits for its promotion; each keeps its run_at")
	require.True(t, st.work)
	require.True(t, st.promote)
	ok, err = st.pause(false)
	require.NoError(t, err)
	require.False(t, ok, "resumed already")

	st = loaded(t, g, `x=1@1`, `y AVAILABLE#1{x:1}`)
	require.True(t, st.cancel("stop"))
	ok, err = st.pause(true)
	require.NoError(t, err)
	require.False(t, ok, "a canceled execution stays as it is")
}

// An upstream value cleared clears what was computed from it, each clearing in the history at a
// revision of its own, and the node that read it has no attempt left to run.
func TestRuleUnsetClearsDownstream(t *testing.T) {
	g := graph.MustNew("clear", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), noop),
		graph.Compute("z", graph.Needs("y"), noop),
	})
	st := loaded(t, g, `x=1@1`, `y=2@2 SUCCESS#1{x:1}`, `z=3@3 SUCCESS#1{y:2}`)
	rev, err := st.setValues(Setting{ID: "E1", Unset: []string{"x"}})
	require.NoError(t, err)
	require.Equal(t, int64(6), rev, "the revision after the write, its clearings included")
	require.Equal(t, []string{
		`row x @4`,
		`row y @5 SUCCESS#1{"x":1}`,
		`row z @6 SUCCESS#1{"y":2}`,
		`history x =1@1`, `history x =@4`,
		`history y =2@2`, `history y =@5`,
		`history z =3@3`, `history z =@6`,
	}, plan(st))
	require.Equal(t, []int64{1, 4, 2, 5, 3, 6}, []int64{st.history[0].Hseq, st.history[1].Hseq, st.history[2].Hseq,
		st.history[3].Hseq, st.history[4].Hseq, st.history[5].Hseq}, "each entry in its place: a value, then its clearing")
	require.Equal(t, []int64{4, 5, 6}, []int64{st.marks["x"].hseq, st.marks["y"].hseq, st.marks["z"].hseq},
		"a row keeps the place of its clearing")
}

// One batch of k outcomes leaves the values and revisions that k writes of one outcome each leave;
// an attempt that an outcome of the batch makes, a later one makes again, before anyone sees it.
func TestRuleABatchIsItsOutcomesOneByOne(t *testing.T) {
	g := fanOut(4)
	specs := []string{`x=1@1`, `f1 RUNNING#1{x:1}/t1`, `f2 RUNNING#1{x:1}/t2`, `f3 RUNNING#1{x:1}/t3`, `f4 RUNNING#1{x:1}/t4`}
	outcome := func(st *execState, node string) Outcome {
		return Outcome{C: st.latest[node], Result: json.RawMessage(`"` + node + `"`), Used: map[string]int64{"x": 1}}
	}
	batch := loaded(t, g, specs...)
	for _, node := range []string{"f3", "f1", "f4", "f2"} {
		require.NoError(t, batch.recordOne(outcome(batch, node)))
	}
	values := graph.Values{}
	one := loaded(t, g, specs...)
	for _, node := range []string{"f3", "f1", "f4", "f2"} {
		require.NoError(t, one.recordOne(outcome(one, node)))
		one.made = nil // the next outcome is a write of its own
		for n, v := range one.values {
			values[n] = v
		}
	}
	require.Equal(t, one.values, batch.values)
	require.Equal(t, one.revision, batch.revision)
	require.Equal(t, one.latest["all"].ComputedWith, batch.latest["all"].ComputedWith, "all needs the four")
	require.Equal(t, fmt.Sprintf(`{"f1":%d}`, one.values["f1"].Revision), one.latest["either"].ComputedWith,
		"one by one, either runs with f1, the first of its two in")
	require.Equal(t, fmt.Sprintf(`{"f1":%d,"f2":%d}`, batch.values["f1"].Revision, batch.values["f2"].Revision),
		batch.latest["either"].ComputedWith, "in one batch, its attempt is made again with both")
	require.Empty(t, batch.superseded, "no attempt of the batch's own making is kept as replaced")
	require.Equal(t, values, one.values)
}

// jsonEqual follows PostgreSQL's jsonb equality, checked against PostgreSQL itself on pairs that
// spell the same value differently and pairs that differ slightly.
func TestJSONEqualIsJsonbEquality(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pairs := [][2]string{
		{`1`, `1.0`}, {`1`, `1e0`}, {`100`, `1e2`}, {`0.1`, `1e-1`}, {`-0`, `0`}, {`1`, `2`}, {`1.00000000000000000001`, `1`},
		{`"a"`, `"\u0061"`}, {`"é"`, `"\u00e9"`}, {`"a"`, `"A"`}, {`"\/"`, `"/"`}, {`""`, `null`},
		{`{"a":1,"b":2}`, `{"b":2,"a":1}`}, {`{"a":1}`, `{"a":1,"a":1}`}, {`{"a":1,"a":2}`, `{"a":2}`}, {`{"a":1}`, `{"a":1,"b":null}`},
		{`[1,2]`, `[2,1]`}, {`[]`, `{}`}, {`[1.0,{"x":[true]}]`, `[1,{"x":[true]}]`}, {`true`, `"true"`}, {`null`, `null`},
		{` {"a" : [ 1 , 2 ] } `, `{"a":[1,2]}`}, {`12345678901234567890`, `12345678901234567890.0`}, {`1e400`, `1e400`},
	}
	for i := range 200 { // generated: numbers written in several ways, keys in several orders
		n := float64(i*37%1000) / 8
		pairs = append(pairs, [2]string{
			fmt.Sprintf(`{"n":%g,"k%d":[%d,"s"]}`, n, i%7, i),
			fmt.Sprintf(`{"k%d":[%d.0,"s"],"n":%s}`, (i+i/50)%7, i, strings.TrimSuffix(fmt.Sprintf("%.6f", n), "0")),
		})
	}
	ctx := context.Background()
	for _, p := range pairs {
		var want bool
		require.NoError(t, b.db.NewRaw("SELECT ?::jsonb = ?::jsonb", p[0], p[1]).Scan(ctx, &want), "%s, %s", p[0], p[1])
		require.Equal(t, want, jsonEqual([]byte(p[0]), []byte(p[1])), "%s = %s", p[0], p[1])
	}
}

// The signatures the rules read, as String and as PostgreSQL's jsonb write them, are read by hand
// with one allocation (its map), and read as json.Unmarshal reads them.
func TestParseSignatureReadsTheWrittenFormsByHand(t *testing.T) { // not parallel: AllocsPerRun
	sig := signature{"x": 1, "upstream": 42, "z": -3}
	for _, s := range []string{sig.String(), `{"x": 1, "z": -3, "upstream": 42}`} {
		got, ok := scanSignature(s)
		require.True(t, ok, s)
		require.Equal(t, sig, got)
		require.Equal(t, sig, parseSignature(s))
		require.LessOrEqual(t, testing.AllocsPerRun(100, func() { parseSignature(s) }), 2.0, s)
		require.True(t, sameSignature(s, sig), s)
		require.Zero(t, testing.AllocsPerRun(100, func() { sameSignature(s, sig) }), "comparing %s", s)
		for _, other := range []signature{{"x": 1, "upstream": 42}, {"x": 1, "upstream": 42, "z": -3, "w": 0}, {"x": 1, "upstream": 41, "z": -3}} {
			require.False(t, sameSignature(s, other), "%s is not %v", s, other)
		}
	}
	for _, s := range []string{"", "null", `{"a\"b": 1}`, `{"x": 1.5}`, `{"x": 1,}`} {
		_, ok := scanSignature(s)
		require.False(t, ok, "%q goes to json.Unmarshal", s)
	}
	require.Equal(t, signature{`a"b`: 1}, parseSignature(`{"a\"b": 1}`))
	require.True(t, sameSignature(`{"a\"b": 1}`, signature{`a"b`: 1}), "a signature read by json.Unmarshal compares too")
}

// A signature is written as json.Marshal writes it, in one allocation when its names are plain.
func TestSignatureStringIsJSON(t *testing.T) { // not parallel: AllocsPerRun
	many := signature{}
	for i := range 12 {
		many[fmt.Sprintf("n%02d", i)] = int64(i * 1000)
	}
	for _, sig := range []signature{{}, {"x": 1}, {"b": -7, "a": 9223372036854775807, "c": 0}, many,
		{"a<b": 1, "q\"": 2}, {"é": 3, "tab\t": 4}, {"a&b": 5, `back\slash`: 6}} {
		want, err := json.Marshal(map[string]int64(sig))
		require.NoError(t, err)
		require.Equal(t, string(want), sig.String())
	}
	plain := signature{"upstream": 42, "x": 1}
	require.LessOrEqual(t, testing.AllocsPerRun(100, func() { _ = plain.String() }), 1.0)
}

// computedWith answers what comparing with the node's signature answers, without making it.
func TestComputedWithComparesWithoutMakingTheSignature(t *testing.T) { // not parallel: AllocsPerRun
	g := graph.MustNew("sig", "v1", []graph.Node{
		graph.Input("a"), graph.Input("b"), graph.Input("c"),
		graph.Compute("d", graph.Or(graph.Needs("a"), graph.Needs("b")), noop),
	})
	d, _ := g.Node("d")
	at := func(rev int64) graph.Value { return graph.Value{Raw: json.RawMessage(`1`), Revision: rev} }
	vals := graph.Values{"a": at(5), "b": at(7), "c": at(9)}
	for _, s := range []string{`{"a":5,"b":7}`, `{"b": 7, "a": 5}`, `{"a":5}`, `{"a":5,"b":6}`, `{"a":5,"b":7,"c":9}`,
		`{}`, `{"a":5,"c":7}`, `{"a\"": 5}`, `{"a":5,"b":7.0}`} {
		require.Equal(t, sameSignature(s, Signature(d, vals)), computedWith(s, d, vals), s)
	}
	require.True(t, computedWith(`{"a":5,"b":7}`, d, vals))
	require.False(t, computedWith(`{"a":5,"b":7}`, d, graph.Values{"a": at(5)}), "b has no value now")
	require.False(t, computedWith(`{"a":5,"b":7}`, d, graph.Values{"a": at(5), "b": {Revision: 7, Failed: true}}), "b failed, with no value")
	require.True(t, computedWith(`{"a":5}`, d, graph.Values{"a": at(5), "b": {Failed: true}, "c": at(1)}), "c is not upstream, b has no value")
	require.Zero(t, testing.AllocsPerRun(100, func() { computedWith(`{"a":5,"b":7}`, d, vals) }))
}

// A row whose attempt stays the one loaded, claimed as it was, is written by nodeOutcomeQuery,
// which leaves the claim's and the heartbeats' columns alone; any other change, a new attempt,
// a claim, or a moved deadline, writes the whole row.
func TestRuleKeepsAttempt(t *testing.T) {
	g := graph.MustNew("keeps", "v1", []graph.Node{
		graph.Input("a"),
		graph.Compute("b", graph.Needs("a"), noop),
		graph.Compute("d", graph.Needs("b"), noop),
	})
	load := func() *execState { return loaded(t, g, `a=2@5`, `b=10@2 RUNNING#1{a:5}/tb`, `d=30@4 SUCCESS#1{b:2}`) }

	st := load()
	require.NoError(t, st.recordOne(Outcome{C: st.latest["b"], Result: json.RawMessage(`11`), Used: map[string]int64{"a": 5}}))
	require.Equal(t, StateSuccess, st.latest["b"].State)
	require.True(t, st.keepsAttempt("b"), "an outcome: the value and the attempt's end")
	require.False(t, st.keepsAttempt("d"), "a new attempt replaces the one loaded")
	require.True(t, st.keepsAttempt("a"), "an input has no attempt, before or after")

	st = load()
	st.claimed = append(st.claimed, st.latest["b"])
	require.False(t, st.keepsAttempt("b"), "claimed by the write: its times are stamped by the statement")

	st = load()
	later := ruleNow.Add(time.Minute)
	st.latest["b"].HeartbeatDeadline = &later
	require.False(t, st.keepsAttempt("b"), "a deadline moved")

	st = load()
	st.latest["b"].ReplicaID = nil
	require.False(t, st.keepsAttempt("b"), "released")

	st = load()
	st.key = GraphKey(g.Name(), "v2")
	require.False(t, st.keepsAttempt("b"), "moved to another version")
}
