package machine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

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
func row(t *testing.T, g *graph.Graph, spec string) Row {
	t.Helper()
	node, rest, _ := strings.Cut(spec, " ")
	at := ruleNow.Add(-time.Hour)
	r := Row{GraphKey: g.Name() + "@" + g.Version()}
	if name, value, ok := strings.Cut(node, "="); ok {
		raw, rev, _ := strings.Cut(value, "@")
		var n int64
		_, err := fmt.Sscan(rev, &n)
		require.NoError(t, err, spec)
		r.Node, r.Rev = name, n
		r.Value = &graph.Value{Raw: json.RawMessage(raw), Revision: n, SetAt: at}
	} else {
		r.Node = node
	}
	if rest = strings.TrimSpace(rest); rest != "" {
		state, more, _ := strings.Cut(rest, "#")
		number, more, _ := strings.Cut(more, "{")
		sig, token, _ := strings.Cut(more, "}")
		var attempt int
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
		r.Attempt = &Attempt{ID: int64(len(r.Node)*100 + attempt), Lane: 3, ExecutionID: "E1", GraphKey: r.GraphKey, Node: r.Node,
			State: state, Attempt: attempt, MaxAttempts: set.MaxAttempts, RunAt: at, CreatedAt: at, ComputedWith: computed.String(),
			AbandonAfterMS: set.AbandonAfter.Milliseconds(), HeartbeatTimeoutMS: set.HeartbeatTimeout.Milliseconds()}
		if token = strings.TrimPrefix(token, "/"); token != "" {
			replica := "r1"
			r.Attempt.ClaimToken, r.Attempt.ReplicaID = &token, &replica
		}
		for _, v := range computed {
			r.Rev = max(r.Rev, v+1)
		}
	}
	return r
}

// loaded is an execution of g as a write loads it, from rows.
func loaded(t *testing.T, g *graph.Graph, specs ...string) *Loaded {
	t.Helper()
	x := &Loaded{Exec: Execution{ID: "E1", Lane: 3, GraphName: g.Name(), GraphVersion: g.Version(), CreatedAt: ruleNow.Add(-time.Hour)},
		Graph: g, GraphKey: g.Name() + "@" + g.Version()}
	for i, spec := range specs {
		r := row(t, g, spec)
		if r.Value != nil {
			r.Hseq = int64(i + 1) // the values' places in the history: in the order given
		}
		x.Rows = append(x.Rows, r)
	}
	return x
}

// testEnv is the environment of the tests' steps, at ruleNow: attempt ids from 1000 on, and
// tokens "tok-1", "tok-2", ….
func testEnv() Env {
	id, token := int64(999), 0
	return Env{Now: ruleNow, NewID: func() int64 { id++; return id },
		NewToken: func() string { token++; return fmt.Sprintf("tok-%d", token) }}
}

// stepOK plans ev on x, and fails the test if it is refused.
func stepOK(t *testing.T, x *Loaded, ev Event) *Plan {
	t.Helper()
	p, err := Step(x, ev, testEnv())
	require.NoError(t, err)
	return p
}

// plan describes what p writes, compactly (see Plan.String), a line each.
func plan(p *Plan) []string {
	s := strings.TrimSuffix(p.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// outcome is the success of node's claimed attempt in x with result, computed with used.
func outcome(x *Loaded, node, result string, used map[string]int64) Outcome {
	return Outcome{Claim: claimOf(x, node), Result: json.RawMessage(result), Used: used}
}

// claimOf is the claimed attempt of node, as loaded in x.
func claimOf(x *Loaded, node string) *Attempt {
	for _, r := range x.Rows {
		if r.Node == node {
			c := *r.Attempt
			return &c
		}
	}
	panic("no row " + node)
}

// 1. A Set makes the first attempt: the value at the next revision, and the attempt of the node
// it completes, computed with both inputs; work and a change to announce.
func TestRuleASetMakesTheFirstAttempt(t *testing.T) {
	g := graph.MustNew("greet", "v1", []graph.Node{
		graph.Input("name"), graph.Input("email"),
		graph.Compute("greeting", graph.Needs("name", "email"), noop),
	})
	x := loaded(t, g, `name="ada"@1`)
	p := stepOK(t, x, Set{Set: map[string]json.RawMessage{"email": json.RawMessage(`"ada@example.com"`)}})
	require.Equal(t, int64(2), p.Revision())
	require.Equal(t, []string{
		`row email @2 ="ada@example.com"@2`,
		`row greeting @2 AVAILABLE#1{"email":2,"name":1}`,
	}, plan(p))
	require.True(t, p.Work(), "work to announce")
	require.True(t, p.Changed(), "a change to announce")
	require.Equal(t, `name="ada"@1`, fmt.Sprintf("%s=%s@%d", x.Rows[0].Node, x.Rows[0].Value.Raw, x.Rows[0].Value.Revision),
		"the loaded execution is as it was")
	require.Len(t, x.Rows, 1)

	// The same value again changes nothing.
	x = loaded(t, g, `name="ada"@1`, `email={"a":1,"b":[1.0]}@2`)
	p = stepOK(t, x, Set{Set: map[string]json.RawMessage{"email": json.RawMessage(`{ "b": [1], "a": 1 }`)}})
	require.Equal(t, int64(2), p.Revision(), "jsonb's equality: keys in any order, 1.0 is 1")
	require.Empty(t, plan(p))
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
	x := loaded(t, g, `a=2@5`, `b=10@2 RUNNING#2{a:5}/tb`, `c=20@3 RUNNING#2{a:5}/tc`, `d=30@4 SUCCESS#1{b:2,c:3}`)
	env := testEnv()
	p := Begin(x, env)
	require.Equal(t, int64(6), p.Revision())
	old := claimOf(x, "c")
	stale := "t-old"
	old.ClaimToken = &stale
	require.ErrorIs(t, p.Step(Outcome{Claim: old, Result: json.RawMessage(`1`)}, env), ErrClaimLost, "the old token's outcome is refused")
	require.Empty(t, plan(p), "and changes nothing")

	for _, o := range []Outcome{outcome(x, "b", `10`, map[string]int64{"a": 5}), outcome(x, "c", `21`, map[string]int64{"a": 5})} {
		require.NoError(t, p.Step(o, env))
	}
	require.Equal(t, []string{
		`row b @7 =10@2 SUCCESS#2{"a":5}`,
		`row c @8 =21@8 SUCCESS#2{"a":5}`,
		`row d @8 =30@4 AVAILABLE#1{"b":2,"c":8}`,
		`history c =20@3`,
		`replaced d SUCCESS#1`,
	}, plan(p))
	require.ErrorIs(t, p.Step(outcome(x, "c", `22`, nil), env), ErrClaimLost, "a recorded outcome holds its claim no more")
}

// 3. Retry, then fail: the first failure makes attempt #2 PENDING for the backoff, the first in
// the attempts' history; the second fails the node, and claims the execution's failure.
func TestRuleRetryThenFail(t *testing.T) {
	g := graph.MustNew("retry", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("n", graph.Needs("x"), noop, graph.MaxAttempts(2),
			graph.Backoff(func(int) time.Duration { return 30 * time.Second })),
	})
	x := loaded(t, g, `x=1@1`, `n RUNNING#1{x:1}/t1`)
	p := stepOK(t, x, Outcome{Claim: claimOf(x, "n"), Err: errors.New("boom")})
	require.Equal(t, []string{
		`row n @3 PENDING#2{"x":1} at+30s`,
		`replaced n FAILED#1`,
	}, plan(p))

	x = loaded(t, g, `x=1@1`, `n RUNNING#2{x:1}/t2`)
	p = stepOK(t, x, Outcome{Claim: claimOf(x, "n"), Err: errors.New("boom again")})
	require.Equal(t, []string{
		`row n @3 FAILED#2{"x":1}`,
		`claim ` + EventFailed,
	}, plan(p))
	require.Equal(t, "boom again", *p.Latest("n").Error)
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
	x := loaded(t, g, `x=1@1`, `charge RUNNING#1{x:1}/t1`)
	p := stepOK(t, x, Outcome{Claim: claimOf(x, "charge"), Err: errors.New("card declined")})
	require.Equal(t, []string{
		`row charge @3 FAILED#1{"x":1}`,
		`row restock @3 AVAILABLE#1{}`,
		`claim ` + EventFailed,
	}, plan(p))
	require.Equal(t, graph.Value{Failed: true, Error: "card declined"}, seen["charge"], "gates see the failure")
	require.False(t, p.Values().Has("charge"), "and it is no value")

	// The compensation's value stays: its gate holds, and it ran with what it reads.
	x = loaded(t, g, `x=1@1`, `charge FAILED#1{x:1}`, `restock RUNNING#1/t2`)
	p = stepOK(t, x, outcome(x, "restock", `"restocked"`, map[string]int64{}))
	require.Equal(t, []string{`row restock @3 ="restocked"@3 SUCCESS#1{}`}, plan(p))

	// Retry: the gate stops holding, the value is cleared.
	x = loaded(t, g, `x=1@1`, `charge FAILED#1{x:1}`, `restock="restocked"@3 SUCCESS#1`)
	p = stepOK(t, x, Retry{Node: "charge"})
	require.Equal(t, []string{
		`row charge @4 AVAILABLE#1{"x":1}`,
		`row restock @5 SUCCESS#1{}`,
		`history restock ="restocked"@3`, `history restock =@5`,
		`replaced charge FAILED#1`,
	}, plan(p))

	// It fails again: the compensation runs again.
	x = loaded(t, g, `x=1@1`, `charge RUNNING#1{x:1}/t3`, `restock SUCCESS#1`)
	p = stepOK(t, x, Outcome{Claim: claimOf(x, "charge"), Err: graph.Permanent(errors.New("card declined again"))})
	require.Equal(t, []string{
		`row charge @3 FAILED#1{"x":1}`,
		`row restock @3 AVAILABLE#1{}`,
		`replaced restock SUCCESS#1`,
		`claim ` + EventFailed,
	}, plan(p))
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
	x := loaded(t, g, `x=1@1`, `y AVAILABLE#1{x:1}`, `z AVAILABLE#1{x:1}`)
	x.Rows[1].Attempt.ConcurrencyKey = &key
	env := testEnv()
	p := Begin(x, env)
	require.NoError(t, p.Step(Pause{}, env))
	require.Equal(t, []string{`row y @3 PAUSED#1{"x":1}`, `row z @3 PAUSED#1{"x":1}`}, plan(p))
	require.True(t, p.Promote(), "y's slot is free")
	require.False(t, p.Work())
	require.True(t, p.Cascade().Pause, "the children follow")
	require.NoError(t, p.Step(Set{Set: map[string]json.RawMessage{"w": json.RawMessage(`2`)}}, env))
	require.Equal(t, StatePaused, p.Latest("v").State, "what a write makes while paused waits")
	require.False(t, p.Work())

	x = loaded(t, g, `x=1@1`, `y PAUSED#1{x:1}`, `z PAUSED#1{x:1}`)
	x.Rows[1].Attempt.ConcurrencyKey = &key
	x.Exec.PausedAt = &ruleNow
	p = Begin(x, env)
	require.NoError(t, p.Step(Pause{Resume: true}, env))
	require.Equal(t, []string{`row y @3 PENDING#1{"x":1} at+-1h0m0s`, `row z @3 AVAILABLE#1{"x":1}`}, plan(p),
		"gated y waits for its promotion; each keeps its run_at")
	require.True(t, p.Work())
	require.True(t, p.Promote())
	rev := p.Revision()
	require.NoError(t, p.Step(Pause{Resume: true}, env))
	require.Equal(t, rev, p.Revision(), "resumed already: nothing changes")

	x = loaded(t, g, `x=1@1`, `y AVAILABLE#1{x:1}`)
	p = stepOK(t, x, Cancel{Reason: "stop"})
	rev = p.Revision()
	require.NoError(t, p.Step(Pause{}, env))
	require.Equal(t, rev, p.Revision(), "a canceled execution stays as it is")
	require.Nil(t, p.Exec().PausedAt)
}

// An upstream value cleared clears what was computed from it, each clearing in the history at a
// revision of its own, and the node that read it has no attempt left to run.
func TestRuleUnsetClearsDownstream(t *testing.T) {
	g := graph.MustNew("clear", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), noop),
		graph.Compute("z", graph.Needs("y"), noop),
	})
	p := stepOK(t, loaded(t, g, `x=1@1`, `y=2@2 SUCCESS#1{x:1}`, `z=3@3 SUCCESS#1{y:2}`), Set{Unset: []string{"x"}})
	require.Equal(t, int64(6), p.Revision(), "the revision after the write, its clearings included")
	require.Equal(t, []string{
		`row x @4`,
		`row y @5 SUCCESS#1{"x":1}`,
		`row z @6 SUCCESS#1{"y":2}`,
		`history x =1@1`, `history x =@4`,
		`history y =2@2`, `history y =@5`,
		`history z =3@3`, `history z =@6`,
	}, plan(p))
	h := p.History()
	require.Equal(t, []int64{1, 4, 2, 5, 3, 6}, []int64{h[0].Hseq, h[1].Hseq, h[2].Hseq, h[3].Hseq, h[4].Hseq, h[5].Hseq},
		"each entry in its place: a value, then its clearing")
	var hseqs []int64
	for _, w := range p.Writes() {
		hseqs = append(hseqs, w.Hseq)
	}
	require.Equal(t, []int64{4, 5, 6}, hseqs, "a row keeps the place of its clearing")
}

// One batch of k outcomes leaves the values and revisions that k writes of one outcome each leave;
// an attempt that an outcome of the batch makes, a later one makes again, before anyone sees it.
func TestRuleABatchIsItsOutcomesOneByOne(t *testing.T) {
	g := fanOut(4)
	specs := []string{`x=1@1`, `f1 RUNNING#1{x:1}/t1`, `f2 RUNNING#1{x:1}/t2`, `f3 RUNNING#1{x:1}/t3`, `f4 RUNNING#1{x:1}/t4`}
	x := loaded(t, g, specs...)
	env := testEnv()
	batch := Begin(x, env)
	for _, node := range []string{"f3", "f1", "f4", "f2"} {
		require.NoError(t, batch.Step(outcome(x, node, `"`+node+`"`, map[string]int64{"x": 1}), env))
	}
	// One by one: each outcome a write of its own, on the rows the one before left.
	one := Begin(x, env)
	for _, node := range []string{"f3", "f1", "f4", "f2"} {
		require.NoError(t, one.Step(outcome(x, node, `"`+node+`"`, map[string]int64{"x": 1}), env))
		one.made = nil // the next outcome is a write of its own
	}
	require.Equal(t, one.Values(), batch.Values())
	require.Equal(t, one.Revision(), batch.Revision())
	require.Equal(t, one.Latest("all").ComputedWith, batch.Latest("all").ComputedWith, "all needs the four")
	require.Equal(t, fmt.Sprintf(`{"f1":%d}`, one.Values()["f1"].Revision), one.Latest("either").ComputedWith,
		"one by one, either runs with f1, the first of its two in")
	require.Equal(t, fmt.Sprintf(`{"f1":%d,"f2":%d}`, batch.Values()["f1"].Revision, batch.Values()["f2"].Revision),
		batch.Latest("either").ComputedWith, "in one batch, its attempt is made again with both")
	require.Empty(t, batch.Superseded(), "no attempt of the batch's own making is kept as replaced")
}

// fanOut is x → f1…fn, all the f's → all, and f1 or f2 → either.
func fanOut(n int) *graph.Graph {
	nodes := []graph.Node{graph.Input("x")}
	var fs []string
	for i := range n {
		f := "f" + strconv.Itoa(i+1)
		fs = append(fs, f)
		nodes = append(nodes, graph.Compute(f, graph.Needs("x"), noop))
	}
	return graph.MustNew("fanout", "v1", append(nodes,
		graph.Compute("all", graph.Needs(fs...), noop),
		graph.Compute("either", graph.Or(graph.Needs("f1"), graph.Needs("f2")), noop)))
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

// A row whose attempt stays the one loaded, claimed as it was, is written by the outcome's
// statement, which leaves the claim's and the heartbeats' columns alone; any other change, a new
// attempt, a claim, or a moved deadline, writes the whole row.
func TestRuleKeepsAttempt(t *testing.T) {
	g := graph.MustNew("keeps", "v1", []graph.Node{
		graph.Input("a"),
		graph.Compute("b", graph.Needs("a"), noop),
		graph.Compute("d", graph.Needs("b"), noop),
	})
	load := func() *Loaded { return loaded(t, g, `a=2@5`, `b=10@2 RUNNING#1{a:5}/tb`, `d=30@4 SUCCESS#1{b:2}`) }
	writes := func(p *Plan) map[string]NodeWrite {
		out := map[string]NodeWrite{}
		for _, w := range p.Writes() {
			out[w.Node] = w
		}
		return out
	}

	x := load()
	p := stepOK(t, x, outcome(x, "b", `11`, map[string]int64{"a": 5}))
	require.Equal(t, StateSuccess, p.Latest("b").State)
	w := writes(p)
	require.True(t, w["b"].Outcome, "an outcome: the value and the attempt's end")
	require.False(t, w["d"].Outcome, "a new attempt replaces the one loaded")
	require.True(t, p.keepsAttempt("a"), "an input has no attempt, before or after")

	p = Begin(load(), testEnv())
	p.claimed = append(p.claimed, p.Latest("b"))
	require.False(t, p.keepsAttempt("b"), "claimed by the write: its times are stamped by the statement")

	p = Begin(load(), testEnv())
	later := ruleNow.Add(time.Minute)
	p.Latest("b").HeartbeatDeadline = &later
	require.False(t, p.keepsAttempt("b"), "a deadline moved")

	p = Begin(load(), testEnv())
	p.Latest("b").ReplicaID = nil
	require.False(t, p.keepsAttempt("b"), "released")

	x = load()
	x.GraphKey = g.Name() + "@v2"
	require.False(t, Begin(x, testEnv()).keepsAttempt("b"), "moved to another version")
}
