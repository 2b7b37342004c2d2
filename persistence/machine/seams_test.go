package machine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
)

// The seams between the lifecycle features, as a table: for every base state of an execution
// and every ordered pair of events (cancel, pause, the pause of the graph version, archive,
// unarchive, retry, recompute, a map's children and its wake, rate limits, concurrency keys and
// MaxParallel, priority, the release at Stop, the reclaim of a dead replica, ticks, a Set in an
// application's REPEATABLE READ transaction), both orders go through Step, each event a write of
// its own on what the one before left (reload), and the invariants hold after every event:
//
//   - a canceled execution never runs anything again;
//   - a paused one (or one of a paused graph version) starts nothing new until resumed;
//   - a concurrency key, a parallel limit or a rate window never loses a holder while its
//     function still runs: only the attempt's own end (its outcome, its abandonment, its release
//     once its function has returned) ends a RUNNING attempt;
//   - a rate window never forgets a start: a claim stays counted, released or not;
//   - every change of an execution raises its revision, and every row it writes carries a revision
//     of its own that no earlier change had;
//   - OnSave fires once per changed value, whatever wrote it;
//   - a child's end is counted once (EndDelta), and its count follows whether it has ended.

// seamGraph has a keyed, limited and rate-limited node y (and z after it), a map node m whose
// children are seamChild, a tick t, and OnSave on every value.
func seamGraph(saved *[]graph.SaveEvent) *graph.Graph {
	return graph.MustNew("seams", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), noop, graph.MaxAttempts(2), graph.Priority(1),
			graph.ConcurrencyKey(func(graph.Values) string { return "k" }), graph.MaxParallel(1),
			graph.RateLimit(2, time.Hour)),
		graph.Compute("z", graph.Needs("y"), noop),
		graph.Map("m", graph.Needs("x"), seamChild, func(graph.Values) ([]map[string]any, error) { return nil, nil }),
		graph.TickOnce("t", graph.Needs("x"), func(context.Context, graph.Values) (time.Time, error) { return time.Time{}, nil }),
	}, graph.WithOnSave(func(_ context.Context, e graph.SaveEvent) { *saved = append(*saved, e) }))
}

// seamChild is the graph of the map's children: it completes once charged has its value.
var seamChild = graph.MustNew("line", "v1", []graph.Node{
	graph.Input("sku"),
	graph.Compute("charged", graph.Needs("sku"), noop, graph.MaxAttempts(1)),
}, graph.CompletesWhen(graph.Needs("charged")))

// seamBases are the states the pairs start from: y in each of its states, m waiting.
var seamBases = []struct {
	name  string
	specs []string
	exec  func(e *Execution)
}{
	{"y available", []string{`x=1@1`, `y AVAILABLE#1{x:1}`, `m WAITING#1{x:1}`}, nil},
	{"y pending", []string{`x=1@1`, `y PENDING#1{x:1}`, `m WAITING#1{x:1}`}, nil},
	{"y running", []string{`x=1@1`, `y RUNNING#1{x:1}/ty`, `m RUNNING#1{x:1}/tm`}, nil},
	{"y done", []string{`x=1@1`, `y=5@2 SUCCESS#1{x:1}`, `z=6@3 SUCCESS#1{y:2}`, `m=[]@4 SUCCESS#1{x:1}`, `t=0@4 SUCCESS#1{x:1}`}, nil},
	{"y failed", []string{`x=1@1`, `y FAILED#2{x:1}`, `m WAITING#1{x:1}`}, nil},
	{"paused", []string{`x=1@1`, `y PAUSED#1{x:1}`, `m WAITING#1{x:1}`}, func(e *Execution) { e.PausedAt = &seamPast }},
	{"archived", []string{`x=1@1`, `y CANCELED#1{x:1}`, `m WAITING#1{x:1}`}, func(e *Execution) { e.ArchivedAt = &seamPast }}, // y: ReasonArchived
	{"tick due", []string{`x=1@1`, `t=1@2 SUCCESS#1{x:1}`, `y RUNNING#1{x:1}/ty`}, nil},
}

var seamPast = ruleNow.Add(-time.Minute)

// seamEvents are the events of the pairs.
var seamEvents = []struct {
	name string
	ev   func(x *Loaded) Event
}{
	{"cancel", func(*Loaded) Event { return Cancel{Reason: "stop"} }},
	{"pause", func(*Loaded) Event { return Pause{} }},
	{"resume", func(*Loaded) Event { return Pause{Resume: true} }},
	{"pause graph", func(*Loaded) Event { return HoldGraph{} }},
	{"resume graph", func(*Loaded) Event { return HoldGraph{Resume: true} }},
	{"archive", func(*Loaded) Event { return Archive{} }},
	{"unarchive", func(*Loaded) Event { return Archive{Unarchive: true} }},
	{"retry", func(*Loaded) Event { return Retry{Node: "y"} }},
	{"recompute", func(*Loaded) Event { return Set{Set: map[string]json.RawMessage{"x": json.RawMessage(`2`)}} }},
	{"set in a repeatable read", func(*Loaded) Event {
		return Set{Set: map[string]json.RawMessage{"x": json.RawMessage(`3`)}, Defer: true}
	}},
	{"claim", func(*Loaded) Event { return Claim{Node: "y", Replica: "r2", Token: "tc"} }},
	{"promote", func(*Loaded) Event { return Promote{Node: "y"} }},
	{"complete", func(x *Loaded) Event { return Outcome{Claim: runningClaim(x, "y"), Result: json.RawMessage(`7`)} }},
	{"fail", func(x *Loaded) Event { return Outcome{Claim: runningClaim(x, "y"), Err: errors.New("boom")} }},
	{"release at stop", func(x *Loaded) Event {
		c := runningClaim(x, "y")
		return Release{Node: "y", Replica: deref(c.ReplicaID), Token: deref(c.ClaimToken)}
	}},
	{"reclaim of a dead replica", func(x *Loaded) Event {
		return Abandon{Node: "y", Token: deref(runningClaim(x, "y").ClaimToken), Reason: "abandoned: replica r1 stopped heartbeating"}
	}},
	{"tick due", func(*Loaded) Event { return Advance{} }},
	{"map's children ended", func(*Loaded) Event { return Wake{Node: "m"} }},
	{"map collects", func(x *Loaded) Event { return Outcome{Claim: runningClaim(x, "m"), Result: json.RawMessage(`[1]`)} }},
	{"local claim", func(*Loaded) Event { return ClaimLocally{Replica: "r1", N: 5} }},
	{"revive", func(*Loaded) Event { return Revive{} }},
	{"sweep of archived work", func(*Loaded) Event { return SweepArchived{} }},
}

// runningClaim is node's attempt as its claim holds it, if it runs; else a claim that holds
// nothing.
func runningClaim(x *Loaded, node string) *Attempt {
	for _, r := range x.Rows {
		if r.Node == node && r.Attempt != nil && r.Attempt.State == StateRunning {
			c := *r.Attempt
			return &c
		}
	}
	token, replica := "none", "r1"
	return &Attempt{Node: node, ClaimToken: &token, ReplicaID: &replica}
}

// reload is what the next write loads once p is applied: the executions row and the node rows as
// p writes them, a local claim stamped at its write's time.
func reload(p *Plan) *Loaded {
	x := &Loaded{Exec: p.exec, Graph: p.g, GraphKey: p.x.GraphKey}
	x.Exec.Revision, x.Exec.WakeAt = p.revision, p.Wake()
	nodes := map[string]bool{}
	for n := range p.marks {
		nodes[n] = true
	}
	for n := range p.values {
		nodes[n] = true
	}
	for n := range p.latest {
		nodes[n] = true
	}
	for _, n := range slices.Sorted(maps.Keys(nodes)) {
		m := p.marks[n]
		r := Row{Node: n, GraphKey: p.x.GraphKey, Hseq: m.hseq}
		switch {
		case m.changed:
			r.Rev = m.rev
		case m.row != nil:
			r.Rev = m.row.Rev
		}
		if v, ok := p.values[n]; ok {
			r.Value = &v
		}
		if c := p.latest[n]; c != nil {
			a := *c
			if slices.Contains(p.claimed, c) {
				now := p.now
				a.ClaimedAt, a.LastHeartbeatAt = &now, &now
			}
			r.Attempt = &a
		}
		x.Rows = append(x.Rows, r)
	}
	return x
}

// seamRun follows one sequence of events through Step, a write each, and checks the invariants
// after each.
type seamRun struct {
	t      *testing.T
	saved  *[]graph.SaveEvent
	x      *Loaded
	at     string // the sequence, for the messages
	starts map[int64]bool
	env    Env
}

func (r *seamRun) step(name string, ev Event) {
	t := r.t
	t.Helper()
	r.at += " → " + name
	before := r.x
	*r.saved = (*r.saved)[:0]
	p, err := Step(before, ev, r.env)
	if err != nil {
		return // refused: the write writes nothing
	}
	for _, s := range p.Saved() {
		s := s
		p.g.OnSave()(context.Background(), s)
	}
	after := reload(p)
	r.check(before, p, after, ev)
	r.x = after
}

// state is node's attempt in x, nil if none.
func state(x *Loaded, node string) *Attempt {
	for _, r := range x.Rows {
		if r.Node == node {
			return r.Attempt
		}
	}
	return nil
}

func (r *seamRun) check(before *Loaded, p *Plan, after *Loaded, ev Event) {
	t := r.t
	t.Helper()
	runningBefore := map[int64]*Attempt{}
	for _, row := range before.Rows {
		if c := row.Attempt; c != nil && c.State == StateRunning {
			runningBefore[c.ID] = c
		}
	}
	for _, row := range after.Rows {
		c := row.Attempt
		if c == nil {
			continue
		}
		_, ran := runningBefore[c.ID]
		// A canceled execution runs nothing again.
		if after.Exec.CanceledAt != nil {
			require.False(t, c.Active() && (c.State != StateRunning || !ran), "%s: %s is %s in a canceled execution", r.at, c.Node, c.State)
		}
		// A paused one starts nothing new: no attempt is made AVAILABLE, nor claimed.
		if after.Exec.PausedAt != nil || p.env.Held {
			was := state(before, c.Node)
			require.False(t, c.State == StateAvailable && (was == nil || was.ID != c.ID || was.State != StateAvailable),
				"%s: %s made AVAILABLE in a paused execution", r.at, c.Node)
			require.False(t, c.State == StateRunning && !ran, "%s: %s started in a paused execution", r.at, c.Node)
		}
		if c.State == StateRunning && !ran {
			r.starts[c.ID] = true
		}
	}
	// A running attempt holds its key, limit and window until its own end.
	own := map[string]bool{}
	switch ev := ev.(type) {
	case Outcome:
		own[ev.Claim.Node] = true
	case Abandon:
		own[ev.Node] = true
	case Release:
		own[ev.Node] = true
	}
	for id, c := range runningBefore {
		now := state(after, c.Node)
		if own[c.Node] {
			continue
		}
		require.True(t, now != nil && now.ID == id && now.State == StateRunning,
			"%s: %s's running attempt ended while its function runs (now %+v)", r.at, c.Node, now)
	}
	// A rate window forgets no start: every claim made is counted, in the rows or the history.
	counted := map[int64]bool{}
	for _, row := range after.Rows {
		if c := row.Attempt; c != nil && c.ClaimedAt != nil {
			counted[c.ID] = true
		}
	}
	for _, c := range p.Superseded() {
		if c.ClaimedAt != nil {
			counted[c.ID] = true
		}
	}
	for _, row := range before.Rows {
		if c := row.Attempt; c != nil && c.ClaimedAt != nil && state(after, c.Node).ID == c.ID {
			require.NotNil(t, state(after, c.Node).ClaimedAt, "%s: %s's claim left its rate window", r.at, c.Node)
		}
	}
	for _, c := range p.Superseded() {
		if before := state(before, c.Node); before != nil && before.ID == c.ID && before.ClaimedAt != nil {
			require.NotNil(t, c.ClaimedAt, "%s: %s's claim left its rate window as it moved to the history", r.at, c.Node)
		}
	}
	// Every change raises the revision; every row written has a revision no earlier change had.
	writes := p.Writes()
	if len(writes) > 0 || p.Cold() && p.Exec().EndedAt != before.Exec.EndedAt {
		require.Greater(t, p.Revision(), before.Exec.Revision, "%s: a change at the revision before it", r.at)
	}
	for _, w := range writes {
		require.Greater(t, w.Rev, before.Exec.Revision, "%s: row %s written at an old revision", r.at, w.Node)
		require.LessOrEqual(t, w.Rev, p.Revision(), "%s: row %s written past the execution's revision", r.at, w.Node)
	}
	// OnSave fires once per changed value.
	changed := map[string]bool{}
	for _, row := range after.Rows {
		var old *graph.Value
		for _, b := range before.Rows {
			if b.Node == row.Node {
				old = b.Value
			}
		}
		if row.Value != nil && (old == nil || old.Revision != row.Value.Revision || string(old.Raw) != string(row.Value.Raw)) {
			changed[row.Node] = true
		}
	}
	fired := map[string]int{}
	for _, s := range *r.saved {
		if s.Err == nil {
			fired[s.Node]++
		}
	}
	for node := range changed {
		require.Equal(t, 1, fired[node], "%s: OnSave of %s, changed", r.at, node)
	}
	for node, n := range fired {
		require.True(t, changed[node], "%s: OnSave of %s, unchanged (%d)", r.at, node, n)
	}
}

func TestSeams(t *testing.T) {
	t.Parallel()
	var saved []graph.SaveEvent
	g := seamGraph(&saved)
	n := 0
	for _, base := range seamBases {
		for _, a := range seamEvents {
			for _, b := range seamEvents {
				for _, held := range []bool{false, true} {
					x := loaded(t, g, base.specs...)
					if base.exec != nil {
						base.exec(&x.Exec)
					}
					key := "k"
					for i := range x.Rows {
						if c := x.Rows[i].Attempt; c != nil && c.Node == "y" {
							c.ConcurrencyKey, c.RateKey, c.MaxParallel = &key, new(""), new(1)
							if c.State == StateCanceled {
								c.Error = new(ReasonArchived) // archiving canceled it: unarchiving revives it
							}
						}
					}
					env := testEnv()
					env.Held = held
					r := &seamRun{t: t, saved: &saved, x: x, at: fmt.Sprintf("%s (held %v)", base.name, held), starts: map[int64]bool{}, env: env}
					r.step(a.name, a.ev(r.x))
					r.step(b.name, b.ev(r.x))
					n++
				}
			}
		}
	}
	require.Equal(t, len(seamBases)*len(seamEvents)*len(seamEvents)*2, n)
}

// A child's end is counted once: the sum of its writes' EndDelta is 1 while it has ended, 0 while
// it runs, whatever ends it and runs it again, in any order.
func TestSeamsChildEndsCountedOnce(t *testing.T) {
	t.Parallel()
	parent := &Parent{ID: "P1", Node: "m", Gen: 7}
	events := []struct {
		name string
		ev   func(x *Loaded) Event
	}{
		{"complete", func(x *Loaded) Event { return Outcome{Claim: runningClaim(x, "charged"), Result: json.RawMessage(`1`)} }},
		{"fail", func(x *Loaded) Event { return Outcome{Claim: runningClaim(x, "charged"), Err: errors.New("declined")} }},
		{"retry", func(*Loaded) Event { return Retry{Node: "charged"} }},
		{"claim", func(*Loaded) Event { return Claim{Node: "charged", Replica: "r1", Token: "tc"} }},
		{"cancel", func(*Loaded) Event { return Cancel{Reason: "parent canceled"} }},
		{"archive", func(*Loaded) Event { return Archive{} }},
		{"unarchive", func(*Loaded) Event { return Archive{Unarchive: true} }},
		{"pause", func(*Loaded) Event { return Pause{} }},
		{"resume", func(*Loaded) Event { return Pause{Resume: true} }},
		{"set again", func(*Loaded) Event { return Set{Set: map[string]json.RawMessage{"sku": json.RawMessage(`"b"`)}} }},
		{"abandon", func(x *Loaded) Event {
			return Abandon{Node: "charged", Token: deref(runningClaim(x, "charged").ClaimToken), Reason: "abandoned: replica r1 stopped heartbeating"}
		}},
	}
	// ended is the rule, restated: canceled, archived, or nothing to run and failed or complete.
	ended := func(x *Loaded) bool {
		if x.Exec.ArchivedAt != nil || x.Exec.CanceledAt != nil {
			return true
		}
		c := state(x, "charged")
		if c != nil && c.Active() {
			return false
		}
		if c != nil && c.FailedForGood() {
			return true
		}
		for _, r := range x.Rows {
			if r.Node == "charged" && r.Value != nil {
				return true
			}
		}
		return false
	}
	for _, a := range events {
		for _, b := range events {
			for _, c := range events {
				x := loaded(t, seamChild, `sku="a"@1`, `charged RUNNING#1{sku:1}/tc`)
				x.Exec.Parent = parent
				count := 0
				seq := ""
				for _, e := range []struct {
					name string
					ev   func(x *Loaded) Event
				}{a, b, c} {
					seq += " → " + e.name
					p, err := Step(x, e.ev(x), testEnv())
					if err != nil {
						continue
					}
					count += p.EndDelta()
					x = reload(p)
					require.Equal(t, ended(x), x.Exec.EndedAt != nil, "%s: ended_at follows the child's end", seq)
					want := 0
					if ended(x) {
						want = 1
					}
					require.Equal(t, want, count, "%s: the child's end counted once", seq)
				}
			}
		}
	}
}

// A released claim of a paused execution waits PAUSED, and a released rate-limited one waits
// PENDING for its window, with its claim in the history, counted in the window.
func TestSeamsReleaseWaitsAsANewAttemptWould(t *testing.T) {
	t.Parallel()
	var saved []graph.SaveEvent
	g := seamGraph(&saved)
	x := loaded(t, g, `x=1@1`, `y RUNNING#1{x:1}/ty`)
	claimed := seamPast
	x.Rows[1].Attempt.ClaimedAt, x.Rows[1].Attempt.RateKey = &claimed, new("")
	p := stepOK(t, x, Release{Node: "y", Replica: "r1", Token: "ty"})
	require.Equal(t, StatePending, p.Latest("y").State, "it waits for its window")
	require.Equal(t, 1, p.Latest("y").Attempt, "the release uses no attempt")
	require.Equal(t, x.Rows[1].Attempt.RunAt, p.Latest("y").RunAt, "it keeps its place in the queue")
	require.Len(t, p.Superseded(), 1)
	require.Equal(t, StateCanceled, p.Superseded()[0].State)
	require.Equal(t, &claimed, p.Superseded()[0].ClaimedAt, "its claim stays in the window")
	require.True(t, p.Promote())

	x.Exec.PausedAt = &seamPast
	p = stepOK(t, x, Release{Node: "y", Replica: "r1", Token: "ty"})
	require.Equal(t, StatePaused, p.Latest("y").State, "a paused execution's released attempt waits PAUSED")

	_, err := Step(x, Release{Node: "y", Replica: "r2", Token: "ty"}, testEnv())
	require.ErrorIs(t, err, ErrNothingToDo, "another replica's release")

	x.Exec.PausedAt, x.Exec.CanceledAt, x.Exec.CancelReason = nil, &seamPast, new("gone")
	p = stepOK(t, x, Release{Node: "y", Replica: "r1", Token: "ty"})
	require.Equal(t, StateCanceled, p.Latest("y").State, "nothing of a canceled execution waits again")
	require.True(t, strings.HasPrefix(*p.Latest("y").Error, "canceled: gone"), *p.Latest("y").Error)
}
