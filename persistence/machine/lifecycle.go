package machine

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// The rules of the events that move attempts without a value: claims, promotions, releases,
// abandonments, a graph version's pause, a map node's wake; and what every event settles after it
// (settle).

// Abandonment reasons recorded in an attempt's error.
const (
	ReasonDeadline  = "abandoned: deadline passed"
	ReasonHeartbeat = "abandoned: heartbeat deadline passed"
)

// ReasonReleased is the error of a claim handed back at a graceful stop (Release), in the
// attempts' history.
func ReasonReleased(replicaID string) string {
	return "released: replica " + replicaID + " stopped; the attempt waits again"
}

// errAbandoned is the cause recorded for OnSave when abandonment used up the attempts.
var errAbandoned = errors.New("timed out")

// abandonClaim abandons the running attempt of ev.Node claimed with ev.Token, if it still is,
// and its deadline has passed for the reasons that say so (a heartbeat may have landed since the
// sweep looked): ErrNothingToDo otherwise.
func (p *Plan) abandonClaim(ev Abandon) error {
	c := p.latest[ev.Node]
	switch {
	case c == nil || !Held.Holds(&p.exec, c, p.now) || deref(c.ClaimToken) != ev.Token:
		return ErrNothingToDo
	case ev.Reason == ReasonHeartbeat && c.HeartbeatDeadline != nil && c.HeartbeatDeadline.After(p.now):
		return ErrNothingToDo // a heartbeat landed since
	case ev.Reason == ReasonDeadline && c.Deadline != nil && c.Deadline.After(p.now):
		return ErrNothingToDo
	}
	return p.abandon(c, ev.Reason)
}

// release hands back the running attempt of ev.Node claimed by ev.Replica with ev.Token. The
// claim moves to the attempts' history, CANCELED with the reason: it keeps its claim's time, and
// so its place in its rate window. A new attempt, with the same number, the same place in the
// queue and the same settings, is made ready as any other (Ready): PAUSED in a paused execution,
// PENDING for its promotion if it waits for a key, a limit or a window.
func (p *Plan) release(ev Release) error {
	c := p.latest[ev.Node]
	if c == nil || c.State != StateRunning || deref(c.ClaimToken) != ev.Token || deref(c.ReplicaID) != ev.Replica {
		return ErrNothingToDo
	}
	p.revision++
	if p.exec.CanceledAt != nil { // nothing of it runs again
		p.endCanceled(c, ReasonReleased(ev.Replica))
		return nil
	}
	p.promote = p.promote || c.Gated() // its slot is free
	next := *c
	next.ReplicaID, next.ClaimToken, next.ClaimedAt, next.Deadline = nil, nil, nil, nil
	next.HeartbeatDeadline, next.LastHeartbeatAt, next.AvailableAt, next.FinishedAt, next.Error = nil, nil, nil, nil, nil
	next.CreatedAt = p.now
	why := Storable(ReasonReleased(ev.Replica))
	c.State, c.Error, c.FinishedAt = StateCanceled, &why, &p.now
	p.makeReady(&next)
	p.newAttempt(&next)
	return nil
}

// claimLocally claims for replica up to n of the AVAILABLE attempts the write made: each is
// RUNNING under a fresh token, whose time and deadlines the statement that writes it stamps. A
// claim is a revision of its execution, as Store.Claim's is. What it leaves unclaimed is
// announced to the other replicas.
func (p *Plan) claimLocally(replica string, n int) {
	var ready []*Attempt
	for _, c := range p.created {
		if c.State == StateAvailable && p.latest[c.Node] == c {
			ready = append(ready, c)
		}
	}
	n = min(n, len(ready))
	if n <= 0 {
		return
	}
	for _, c := range ready[:n] {
		token := p.env.NewToken()
		c.State, c.ReplicaID, c.ClaimToken, c.AvailableAt = StateRunning, &replica, &token, nil
		p.revision++
		p.touch(c.Node)
		p.claimed = append(p.claimed, c)
	}
	// The work NOTIFY is for attempts that other replicas may claim.
	p.work = len(ready) > n
}

// claim claims the AVAILABLE attempt of ev.Node for ev.Replica, at the write's time: Store.Claim's
// statement does the same for many attempts at once (Claimable), for the graph versions that are
// not paused, as the replica last heard.
func (p *Plan) claim(ev Claim) error {
	c := p.latest[ev.Node]
	if c == nil || p.env.Held || !Claimable.Holds(&p.exec, c, p.now) {
		return ErrNothingToDo
	}
	p.revision++
	token, now := ev.Token, p.now
	deadline, beat := now.Add(time.Duration(c.AbandonAfterMS)*time.Millisecond), now.Add(time.Duration(c.HeartbeatTimeoutMS)*time.Millisecond)
	c.State, c.ReplicaID, c.ClaimToken = StateRunning, &ev.Replica, &token
	c.ClaimedAt, c.Deadline, c.HeartbeatDeadline, c.LastHeartbeatAt = &now, &deadline, &beat, &now
	p.touch(c.Node)
	return nil
}

// promoteNode makes the PENDING attempt of node AVAILABLE, as a promotion does once it has found
// room for it (PromotableUngated, PromotableGated), in a graph version that is not paused, as the
// replica last heard.
func (p *Plan) promoteNode(node string) error {
	c := p.latest[node]
	if c == nil || p.env.Held || !PromotableUngated.Holds(&p.exec, c, p.now) && !PromotableGated.Holds(&p.exec, c, p.now) {
		return ErrNothingToDo
	}
	p.revision++
	c.State, c.AvailableAt = StateAvailable, &p.now
	p.work = true
	p.touch(c.Node)
	return nil
}

// holdGraph pauses, or resumes, the execution's graph version: its waiting attempts wait PAUSED,
// or, resuming, those of an execution that is not paused itself are made ready again, each
// keeping its run_at (GraphPausing, Revivable).
func (p *Plan) holdGraph(held bool) {
	p.env.Held = held
	for _, name := range slices.Sorted(maps.Keys(p.latest)) {
		switch c := p.latest[name]; {
		case held && GraphPausing.Holds(&p.exec, c, p.now):
			p.holdAttempt(c)
		case !held && Revivable.Holds(&p.exec, c, p.now):
			p.makeReady(c)
			p.attemptChanged(c)
		}
	}
}

// revive makes ready the PAUSED attempts that nothing pauses any more (Revivable): a replica that
// had not heard of a resume made them.
func (p *Plan) revive() {
	if !p.env.Held {
		p.holdGraph(false)
	}
}

// sweepArchived cancels the waiting attempts of an archived execution (ArchivedWaiting).
func (p *Plan) sweepArchived() {
	for _, name := range slices.Sorted(maps.Keys(p.latest)) {
		if c := p.latest[name]; ArchivedWaiting.Holds(&p.exec, c, p.now) {
			p.cancelWaiting(c)
		}
	}
}

// wake makes the WAITING map node node ready to collect its children, which have all ended
// (Wakes): at the back of the queue of ready work, as it is ready from now on.
func (p *Plan) wake(node string) error {
	c := p.latest[node]
	if c == nil || !Wakes.Holds(&p.exec, c, p.now) {
		return ErrNothingToDo
	}
	p.revision++
	c.RunAt = p.now
	p.makeReady(c)
	p.attemptChanged(c)
	return nil
}

// settle follows every event: the completion is claimed once its gate holds with nothing to run,
// and a child execution's end (Ended) is kept, for its parent's map node to count (EndDelta).
func (p *Plan) settle() {
	p.claimCompletion()
	if p.exec.Parent == nil {
		return
	}
	if ended := p.ended(); ended != (p.exec.EndedAt != nil) {
		p.exec.EndedAt = nil
		if ended {
			p.exec.EndedAt = &p.now
		}
		p.cold = true
	}
}

// ended reports whether the execution has ended, as its parent's map node counts it: it was
// canceled or archived; or nothing of it is to run or running, and a node has failed for good or
// its completion gate (graph.CompletesWhen) holds.
func (p *Plan) ended() bool {
	if p.exec.ArchivedAt != nil || p.exec.CanceledAt != nil {
		return true
	}
	failed := false
	for _, c := range p.latest {
		if c.Active() {
			return false
		}
		failed = failed || c.FailedForGood()
	}
	return failed || p.completes()
}

// completes reports whether the graph's completion gate holds; a gate that panics does not.
func (p *Plan) completes() bool {
	gate := p.g.CompletesWhen()
	if gate == nil {
		return false
	}
	ok, err := recovered("the completion gate", func() bool { return gate.Holds(p.withFailures(p.dueView())) })
	return ok && err == nil
}

// String describes the plan's writes compactly, for tests and logs: each node row written, at
// its revision, with its value and current attempt; the history entries; the attempts replaced;
// the events claimed.
func (p *Plan) String() string {
	out := ""
	for _, w := range p.Writes() {
		out += fmt.Sprintf("row %s @%d", w.Node, w.Rev)
		if w.Value != nil {
			out += fmt.Sprintf(" =%s@%d", w.Value.Raw, w.Value.Revision)
		}
		if c := w.Attempt; c != nil {
			out += fmt.Sprintf(" %s#%d%s", c.State, c.Attempt, c.ComputedWith)
			if c.State == StatePending {
				out += " at+" + c.RunAt.Sub(p.now).String()
			}
		}
		out += "\n"
	}
	for _, h := range p.history {
		out += fmt.Sprintf("history %s =%s@%d\n", h.Node, h.Value, h.Revision)
	}
	for _, c := range p.superseded {
		out += fmt.Sprintf("replaced %s %s#%d\n", c.Node, c.State, c.Attempt)
	}
	for _, e := range p.events {
		out += "claim " + e.Event + "\n"
	}
	return out
}
