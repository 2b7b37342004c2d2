package machine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
)

// The events one by one: what each plans, rows in and plan out, with no database.

// A Start advances a new execution with no values, then with its values as one change: the work
// it makes is announced, and no change, as no one waits on an execution before it exists.
func TestStepStart(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("start", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), noop),
		graph.Compute("always", graph.Needs(), noop),
	})
	require.False(t, StartsIdle(g), "always runs on no values")
	p := stepOK(t, loaded(t, g), Start{Values: map[string]json.RawMessage{"x": json.RawMessage(`1`)}})
	require.Equal(t, []string{`row always @0 AVAILABLE#1{}`, `row x @1 =1@1`, `row y @1 AVAILABLE#1{"x":1}`}, plan(p))
	require.True(t, p.Work())
	require.False(t, p.Changed())
	require.Equal(t, 2, p.Ready())
	require.Len(t, p.Created(), 2)

	idle := graph.MustNew("idle", "v1", []graph.Node{graph.Input("x"), graph.Compute("y", graph.Needs("x"), noop)})
	require.True(t, StartsIdle(idle))
	panics := graph.MustNew("panics", "v1", []graph.Node{graph.Input("x"),
		graph.Compute("y", graph.When("x", func(graph.Value) bool { panic("no") }), noop)})
	require.False(t, StartsIdle(panics), "a gate that panics is not idle")
	completes := graph.MustNew("completes", "v1", []graph.Node{graph.Input("x")}, graph.CompletesWhen(graph.Needs()))
	require.False(t, StartsIdle(completes), "its completion holds at once")

	_, err := Step(loaded(t, g), Start{Values: map[string]json.RawMessage{"y": json.RawMessage(`1`)}}, testEnv())
	require.NoError(t, err, "Start checks no inputs: the caller has")
	_, err = Step(loaded(t, g), Set{Set: map[string]json.RawMessage{"y": json.RawMessage(`1`)}}, testEnv())
	require.ErrorIs(t, err, ErrNotInput)
	_, err = Step(loaded(t, g), Set{Unset: []string{"nope"}}, testEnv())
	require.ErrorIs(t, err, ErrUnknownNode)
}

// Local claims take the attempts the write made ready, as many as the replica has room for, each
// a revision of its own; what is left is announced.
func TestStepClaimLocally(t *testing.T) {
	t.Parallel()
	g := fanOut(3)
	x := loaded(t, g)
	env := testEnv()
	p, err := Step(x, Set{Set: map[string]json.RawMessage{"x": json.RawMessage(`1`)}}, env)
	require.NoError(t, err)
	require.Equal(t, 3, p.Ready())
	require.NoError(t, p.Step(ClaimLocally{Replica: "r1", N: 2}, env))
	require.Len(t, p.Claimed(), 2)
	require.Equal(t, int64(3), p.Revision(), "the Set's, then a revision a claim")
	require.True(t, p.Work(), "the third is announced")
	for _, c := range p.Claimed() {
		require.Equal(t, StateRunning, c.State)
		require.Equal(t, "r1", *c.ReplicaID)
		require.True(t, strings.HasPrefix(*c.ClaimToken, "tok-"))
	}
	claimed := 0
	for _, w := range p.Writes() {
		if w.Claimed {
			claimed++
			require.False(t, w.Outcome)
		}
	}
	require.Equal(t, 2, claimed)
	require.NoError(t, p.Step(ClaimLocally{Replica: "r1", N: 5}, env))
	require.Len(t, p.Claimed(), 3)
	require.False(t, p.Work(), "all claimed here: nothing to announce")
	require.NoError(t, p.Step(ClaimLocally{Replica: "r1", N: 0}, env))
	require.Len(t, p.Claimed(), 3, "none left to claim")
	vals := p.ClaimedValues()
	require.EqualValues(t, 1, vals.Int("x"))
}

// A claim and a promotion move one attempt as their statements move many, by the table.
func TestStepClaimAndPromote(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("cp", "v1", []graph.Node{graph.Input("x"), graph.Compute("y", graph.Needs("x"), noop)})
	x := loaded(t, g, `x=1@1`, `y AVAILABLE#1{x:1}`)
	p := stepOK(t, x, Claim{Node: "y", Replica: "r2", Token: "t2"})
	c := p.Latest("y")
	require.Equal(t, StateRunning, c.State)
	require.Equal(t, ruleNow, *c.ClaimedAt)
	require.Equal(t, ruleNow.Add(time.Minute), *c.Deadline)
	require.Equal(t, ruleNow.Add(30*time.Second), *c.HeartbeatDeadline)
	_, err := Step(x, Claim{Node: "x"}, testEnv())
	require.ErrorIs(t, err, ErrNothingToDo, "an input has no attempt")

	x = loaded(t, g, `x=1@1`, `y PENDING#1{x:1}`)
	p = stepOK(t, x, Promote{Node: "y"})
	require.Equal(t, StateAvailable, p.Latest("y").State)
	require.True(t, p.Work())
	x.Rows[1].Attempt.RunAt = ruleNow.Add(time.Hour)
	_, err = Step(x, Promote{Node: "y"}, testEnv())
	require.ErrorIs(t, err, ErrNothingToDo, "not due")
}

// An abandoned attempt is retried with its place in the queue, unless a heartbeat landed since
// the sweep looked or its deadline moved on; abandoned for good, its node fails.
func TestStepAbandon(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("ab", "v1", []graph.Node{graph.Input("x"), graph.Compute("y", graph.Needs("x"), noop, graph.MaxAttempts(2),
		graph.Backoff(func(int) time.Duration { return 0 }))})
	x := loaded(t, g, `x=1@1`, `y RUNNING#1{x:1}/ty`)
	later := ruleNow.Add(time.Second)
	x.Rows[1].Attempt.HeartbeatDeadline = &later
	_, err := Step(x, Abandon{Node: "y", Token: "ty", Reason: ReasonHeartbeat}, testEnv())
	require.ErrorIs(t, err, ErrNothingToDo, "a heartbeat landed since")
	x.Rows[1].Attempt.Deadline = &later
	_, err = Step(x, Abandon{Node: "y", Token: "ty", Reason: ReasonDeadline}, testEnv())
	require.ErrorIs(t, err, ErrNothingToDo, "not past its deadline")
	_, err = Step(x, Abandon{Node: "y", Token: "other", Reason: ReasonDeadline}, testEnv())
	require.ErrorIs(t, err, ErrNothingToDo, "another claim")

	p := stepOK(t, x, Abandon{Node: "y", Token: "ty", Reason: "abandoned: replica r1 stopped heartbeating"})
	require.Equal(t, []string{`row y @3 AVAILABLE#2{"x":1}`, `replaced y ABANDONED#1`}, plan(p))
	require.Equal(t, x.Rows[1].Attempt.RunAt, p.Latest("y").RunAt, "the retry keeps the place in the queue")
	require.True(t, p.PromoteByCaller())

	x = loaded(t, g, `x=1@1`, `y RUNNING#2{x:1}/ty`)
	p = stepOK(t, x, Abandon{Node: "y", Token: "ty", Reason: ReasonHeartbeat})
	require.Equal(t, []string{`row y @3 ABANDONED#2{"x":1}`, `claim ` + EventFailed}, plan(p))
	require.Equal(t, `[{"node":"y","attempts":2,"error":"abandoned: heartbeat deadline passed"}]`, p.Events()[0].FailedNodes)
}

// A gate, a key or a backoff that panics fails its node, once per upstream revisions, with the
// panic; a key that cannot be stored fails the node, or a caller's write.
func TestStepUserCodeThatPanics(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("panics", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("gate", graph.When("x", func(v graph.Value) bool {
			if v.Int() == 2 {
				panic("bad gate")
			}
			return true
		}), noop),
		graph.Compute("key", graph.Needs("x"), noop, graph.ConcurrencyKey(func(in graph.Values) string {
			switch in.Int("x") {
			case 2:
				panic("bad key")
			case 3:
				return "nul\x00"
			}
			return "k"
		})),
		graph.Compute("backoff", graph.Needs("x"), noop, graph.MaxAttempts(3), graph.Backoff(func(int) time.Duration { panic("bad backoff") })),
	})
	p := stepOK(t, loaded(t, g, `x=1@1`), Set{Set: map[string]json.RawMessage{"x": json.RawMessage(`2`)}})
	require.Equal(t, StateFailed, p.Latest("gate").State)
	require.Contains(t, *p.Latest("gate").Error, `the gate of node "gate" panicked: bad gate`)
	require.Equal(t, StateFailed, p.Latest("key").State)
	require.Contains(t, *p.Latest("key").Error, `the ConcurrencyKey of node "key" panicked: bad key`)
	require.Len(t, p.Warnings(), 2)
	require.Equal(t, "execution_id", p.Warnings()[0].Args[0])
	require.Len(t, p.Events(), 1, "one failure event for the write")

	_, err := Step(loaded(t, g, `x=1@1`), Set{Set: map[string]json.RawMessage{"x": json.RawMessage(`3`)}}, testEnv())
	require.ErrorIs(t, err, ErrInvalidValue, "a caller's write fails on a key that cannot be stored")
	x := loaded(t, g, `x=3@1`, `backoff RUNNING#1{x:1}/tb`)
	p = stepOK(t, x, Advance{})
	require.Equal(t, StateFailed, p.Latest("key").State, "elsewhere, the key's node fails")
	require.Contains(t, *p.Latest("key").Error, "a key that cannot be stored")

	p = stepOK(t, x, Outcome{Claim: claimOf(x, "backoff"), Err: errors.New("flaky")})
	require.Equal(t, StateFailed, p.Latest("backoff").State)
	require.Contains(t, *p.Latest("backoff").Error, `flaky; then the Backoff of node "backoff" panicked: bad backoff`)

	// A gate that panics once the attempt has run fails it: for the values as they are.
	x = loaded(t, g, `x=2@2`, `gate RUNNING#1{x:1}/tg`)
	p = stepOK(t, x, outcome(x, "gate", `1`, map[string]int64{"x": 1}))
	require.Equal(t, StateFailed, p.Latest("gate").State)
	require.Equal(t, `{"x":2}`, p.Latest("gate").ComputedWith)
}

// A success whose gate no longer holds is dropped: the attempt is CANCELED, and so is a failure.
func TestStepOutcomeOfAGateThatNoLongerHolds(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("gone", "v1", []graph.Node{graph.Input("x"), graph.Compute("y", graph.Needs("x"), noop)})
	x := loaded(t, g, `x@1`, `y RUNNING#1{x:1}/ty`) // x was cleared
	x.Rows[0].Value = nil
	p := stepOK(t, x, outcome(x, "y", `5`, map[string]int64{"x": 1}))
	require.Equal(t, StateCanceled, p.Latest("y").State)
	require.Equal(t, "canceled: gate no longer holds", *p.Latest("y").Error)
	p = stepOK(t, x, Outcome{Claim: claimOf(x, "y"), Err: errors.New("boom")})
	require.Equal(t, "canceled: gate no longer holds; boom", *p.Latest("y").Error)
}

// A mutate node writes its targets, which keep their revision unless it changes with
// UpdateRevisionOnChange; a historian records each tracked change once; an archive node archives.
func TestStepMutateHistorianArchive(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("kinds", "v1", []graph.Node{
		graph.Input("x"), graph.Input("t"), graph.Input("stop"),
		graph.Mutate("m", graph.Needs("x"), noop, []string{"t"}),
		graph.Historian("h", graph.Needs("x"), graph.MaxEntries(2)),
		graph.Archive("a", graph.Needs("stop")),
	})
	x := loaded(t, g, `x=1@1`, `t=0@1`, `m RUNNING#1{x:1}/tm`)
	p := stepOK(t, x, outcome(x, "m", `9`, map[string]int64{"x": 1}))
	require.Equal(t, int64(1), p.Values()["t"].Revision, "the target keeps its revision")
	require.JSONEq(t, `9`, string(p.Values()["t"].Raw))
	require.JSONEq(t, `{"mutated":["t"],"value":9}`, string(p.Values()["m"].Raw))
	require.JSONEq(t, `[{"node":"x","value":1,"revision":1,"at":"2026-11-27T11:00:00Z"}]`, string(p.Values()["h"].Raw),
		"the historian records x once")

	p = stepOK(t, reload(p), Set{Set: map[string]json.RawMessage{"x": json.RawMessage(`2`)}})
	var entries []HistoryEntry
	require.NoError(t, json.Unmarshal(p.Values()["h"].Raw, &entries))
	require.Len(t, entries, 2)
	require.Equal(t, "2", string(entries[0].Value), "newest first")
	p = stepOK(t, reload(p), Set{Set: map[string]json.RawMessage{"x": json.RawMessage(`3`)}})
	require.NoError(t, json.Unmarshal(p.Values()["h"].Raw, &entries))
	require.Len(t, entries, 2, "at most MaxEntries")

	p = stepOK(t, reload(p), Set{Set: map[string]json.RawMessage{"stop": json.RawMessage(`true`)}})
	require.NotNil(t, p.Exec().ArchivedAt, "the archive node archived the execution")
	require.Equal(t, strings.TrimSpace(string(TickValue(ruleNow))), string(p.Values()["a"].Raw))
	require.True(t, p.Cascade().Archive, "its children follow")
	require.True(t, p.Cold())

	up := graph.MustNew("kinds2", "v1", []graph.Node{
		graph.Input("x"), graph.Input("t"),
		graph.Mutate("m", graph.Needs("x"), noop, []string{"t"}, graph.UpdateRevisionOnChange()),
	})
	x = loaded(t, up, `x=1@1`, `t=0@1`, `m RUNNING#1{x:1}/tm`)
	p = stepOK(t, x, outcome(x, "m", `9`, map[string]int64{"x": 1}))
	require.Equal(t, int64(3), p.Values()["t"].Revision, "with UpdateRevisionOnChange, the completion's")
}

// A tick is due once its time has come: a node that needs it runs then, and not before, and its
// attempt forgets a tick it read before that tick was due; the execution wakes at the next tick.
func TestStepTicks(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("ticks", "v1", []graph.Node{
		graph.Input("x"),
		graph.TickRecurring("t", graph.Needs("x"), func(context.Context, graph.Values) (time.Time, error) { return time.Time{}, nil }),
		graph.Compute("y", graph.Needs("t"), noop),
	})
	soon := string(TickValue(ruleNow.Add(time.Minute)))
	require.Equal(t, "0", string(TickValue(time.Time{})), "a tick that does not fire")
	x := loaded(t, g, `x=1@1`, `t=`+soon+`@2 SUCCESS#1{x:1}`)
	p := stepOK(t, x, Advance{})
	require.Empty(t, plan(p), "nothing is due yet")
	require.True(t, ruleNow.Add(time.Minute).Equal(*p.Wake()), "it wakes when t comes due: %v", *p.Wake())

	due := string(TickValue(ruleNow.Add(-time.Second)))
	x = loaded(t, g, `x=1@1`, `t=`+due+`@2 SUCCESS#1{x:1}`)
	p = stepOK(t, x, Advance{})
	require.Equal(t, StateAvailable, p.Latest("y").State, "due: y runs")
	require.Equal(t, StateAvailable, p.Latest("t").State, "and the recurring tick's next cycle")
	require.Nil(t, p.Wake())

	// y ran with a cycle of t that a later write made, not yet due: it forgets it.
	x = loaded(t, g, `x=1@1`, `t=`+soon+`@4 SUCCESS#2{x:1}`, `y RUNNING#1{t:4}/ty`)
	p = stepOK(t, x, outcome(x, "y", `1`, map[string]int64{"t": 4}))
	require.Equal(t, `{}`, p.Latest("y").ComputedWith)
}

// Archive cancels the waiting attempts, which Unarchive revives; a WAITING map node waits on, and
// its wake makes it ready as the table says.
func TestStepArchiveAndWake(t *testing.T) {
	t.Parallel()
	var saved []graph.SaveEvent
	g := seamGraph(&saved)
	x := loaded(t, g, `x=1@1`, `y AVAILABLE#1{x:1}`, `m WAITING#1{x:1}`)
	x.Rows[1].Attempt.ConcurrencyKey = new("k")
	p := stepOK(t, x, Archive{})
	require.Equal(t, StateCanceled, p.Latest("y").State)
	require.Equal(t, ReasonArchived, *p.Latest("y").Error)
	require.Equal(t, StateWaiting, p.Latest("m").State)
	require.NoError(t, p.Step(Wake{Node: "m"}, testEnv()))
	require.Equal(t, StateCanceled, p.Latest("m").State, "woken in an archived execution: canceled, for Unarchive")
	require.NoError(t, p.Step(Archive{Unarchive: true}, testEnv()))
	require.Equal(t, StateAvailable, p.Latest("m").State)
	require.Equal(t, StatePending, p.Latest("y").State, "y waits for its key")

	x.Exec.PausedAt = &seamPast
	p = stepOK(t, x, Wake{Node: "m"})
	require.Equal(t, StatePaused, p.Latest("m").State, "a paused parent's map waits PAUSED")
	_, err := Step(x, Wake{Node: "y"}, testEnv())
	require.ErrorIs(t, err, ErrNothingToDo)

	x = loaded(t, g, `x=1@1`, `y AVAILABLE#1{x:1}`)
	x.Exec.ArchivedAt = &seamPast
	p = stepOK(t, x, SweepArchived{})
	require.Equal(t, StateCanceled, p.Latest("y").State)
	require.Greater(t, p.Revision(), x.Exec.Revision)
	p = stepOK(t, reload(p), SweepArchived{})
	require.Empty(t, plan(p), "nothing left to cancel")
}

// A graph version's pause parks the waiting attempts; its resume makes ready those of an execution
// that is not paused itself, as Revive does for what a replica made before it heard.
func TestStepHoldGraphAndRevive(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("hold", "v1", []graph.Node{graph.Input("x"), graph.Compute("y", graph.Needs("x"), noop)})
	x := loaded(t, g, `x=1@1`, `y AVAILABLE#1{x:1}`)
	p := stepOK(t, x, HoldGraph{})
	require.Equal(t, StatePaused, p.Latest("y").State)
	x = reload(p)
	p = stepOK(t, x, HoldGraph{Resume: true})
	require.Equal(t, StateAvailable, p.Latest("y").State)
	p = stepOK(t, x, Revive{})
	require.Equal(t, StateAvailable, p.Latest("y").State)
	env := testEnv()
	env.Held = true
	p, err := Step(x, Revive{}, env)
	require.NoError(t, err)
	require.Equal(t, StatePaused, p.Latest("y").State, "still held: nothing to revive")
	x.Exec.PausedAt = &seamPast
	p = stepOK(t, x, HoldGraph{Resume: true})
	require.Equal(t, StatePaused, p.Latest("y").State, "a paused execution stays paused")
}

// A Set in an application's REPEATABLE READ transaction writes its values alone: its advance,
// after the commit, is asked by the execution's wake time, now.
func TestStepDeferredSet(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("defer", "v1", []graph.Node{graph.Input("x"), graph.Compute("y", graph.Needs("x"), noop)})
	x := loaded(t, g, `x=1@1`, `y=2@2 SUCCESS#1{x:1}`)
	p := stepOK(t, x, Set{Set: map[string]json.RawMessage{"x": json.RawMessage(`5`)}, Defer: true})
	require.Equal(t, []string{`row x @3 =5@3`, `history x =1@1`}, plan(p))
	require.True(t, p.Deferred())
	require.Equal(t, ruleNow, *p.Wake())
	require.True(t, p.Cold(), "the wake time is written")
	p = stepOK(t, reload(p), Advance{})
	require.Equal(t, StateAvailable, p.Latest("y").State, "advanced after the commit")
	require.Equal(t, int64(4), p.Revision())
	require.Nil(t, p.Wake())
}

// What the applier reads of a plan.
func TestPlanAccessors(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("acc", "v1", []graph.Node{graph.Input("x"), graph.Compute("y", graph.Needs("x"), noop)})
	x := loaded(t, g, `x=1@1`, `y AVAILABLE#1{x:1}`)
	p := Begin(x, testEnv())
	require.Same(t, x, p.Loaded())
	require.Same(t, g, p.Graph())
	require.Equal(t, "acc@v1", p.GraphKey())
	require.Equal(t, ruleNow, p.Now())
	require.True(t, p.LeftAvailable())
	require.False(t, p.Canceled())
	require.False(t, p.Cascade().Any())
	require.ErrorContains(t, p.Step(nil, testEnv()), "unknown event")
	require.NoError(t, p.Step(Set{Set: map[string]json.RawMessage{"x": json.RawMessage(`2`)}}, testEnv()))
	p.SetStored("x", json.RawMessage(`2.0`))
	require.Equal(t, `2.0`, string(p.Values()["x"].Raw), "the value as PostgreSQL spelled it")
	p.SetStored("nope", json.RawMessage(`1`))
	require.False(t, p.Values().Has("nope"))
	require.NoError(t, p.Step(Cancel{Reason: "bye"}, testEnv()))
	require.True(t, p.Canceled())
	require.True(t, p.Cascade().Any())
	require.Equal(t, "bye", p.Cascade().Reason)
	require.Equal(t, 0, p.EndDelta(), "no child")

	c := p.Latest("y")
	c.ClaimToken, c.ReplicaID = new("tok"), new("r1")
	ref := c.Ref()
	require.Equal(t, ClaimRef{ID: c.ID, Lane: 3, ExecutionID: "E1", Node: "y", Token: "tok"}, ref)
	c.SetClaimedValues(graph.Values{"x": {Raw: json.RawMessage(`1`)}}, true)
	own := c.ClaimedValues()
	require.Len(t, own, 1)
	require.Empty(t, c.ClaimedValues(), "handed over once")
	c.SetClaimedValues(graph.Values{"x": {Raw: json.RawMessage(`1`)}}, false)
	require.Len(t, c.ClaimedValues(), 1, "shared: copied")
	require.True(t, strings.HasPrefix(c.IdempotencyKey(), "E1/y/"))
	require.Len(t, strings.TrimPrefix(c.IdempotencyKey(), "E1/y/"), 16)
	require.True(t, SameSignature(`{"a":1,"b":2}`, `{"b": 2, "a": 1}`))
	require.Equal(t, `{"a":1,"b":2}`, CanonicalSignature(`{"b": 2, "a": 1}`))
	require.True(t, JSONEqual([]byte(`{"a":[1.0]}`), []byte(`{"a":[1]}`)))
	require.Equal(t, "ab", Prefix("abc", 2))
	require.Equal(t, "a", Prefix("aé", 2), "cut at a character boundary")
}

// The table as SQL: each rule and Ready, written with the aliases and the time given.
func TestTableSQL(t *testing.T) {
	t.Parallel()
	require.Equal(t, `(c.state IN ('PENDING')) AND (c.run_at <= $1) AND (c.concurrency_key IS NULL AND c.max_parallel IS NULL `+
		`AND c.rate_key IS NULL) AND (e.archived_at IS NULL AND e.canceled_at IS NULL AND e.paused_at IS NULL)`,
		PromotableUngated.SQL("c", "e", "$1"))
	require.Equal(t, `CASE WHEN e.canceled_at IS NOT NULL THEN 'CANCELED' WHEN e.archived_at IS NOT NULL THEN 'CANCELED' `+
		`WHEN e.paused_at IS NOT NULL THEN 'PAUSED' WHEN NOT (n.run_at <= now()) OR (n.concurrency_key IS NOT NULL OR `+
		`n.max_parallel IS NOT NULL OR n.rate_key IS NOT NULL) THEN 'PENDING' ELSE 'AVAILABLE' END`, ReadySQL("n", "e", "now()"))
	require.Equal(t, `CASE WHEN e.canceled_at IS NOT NULL THEN 'canceled: ' || e.cancel_reason WHEN e.archived_at IS NOT NULL `+
		`THEN 'canceled: execution archived' END`, ReadyErrorSQL("e"))
	a := &Attempt{State: StatePending, RunAt: ruleNow}
	e := &Execution{}
	require.Equal(t, StateAvailable, Ready(e, a, ruleNow, false))
	require.Equal(t, StatePaused, Ready(e, a, ruleNow, true))
	require.Equal(t, StatePending, Ready(e, a, ruleNow.Add(-time.Second), false))
	e.CanceledAt, e.CancelReason = &ruleNow, new("r")
	require.Equal(t, StateCanceled, Ready(e, a, ruleNow, false))
	require.Equal(t, "canceled: r", *readyError(e, StateCanceled))
	require.Nil(t, readyError(e, StatePending))
}
