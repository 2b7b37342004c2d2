package machine

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/journey-go/journey/graph"
)

// Loaded is an execution as a write loads it, under its lock: the executions row, and each node
// row, with the node's value and current attempt. Step does not change it.
type Loaded struct {
	Exec  Execution
	Graph *graph.Graph
	// GraphKey is the key of Graph's version ("name@version"), which the attempts carry.
	GraphKey string
	Rows     []Row
}

// Row is a node's row as loaded.
type Row struct {
	Node string
	// GraphKey is the graph version the row was written under: a row of another version (after a
	// MoveVersion) is written whole.
	GraphKey string
	Rev      int64 // the execution's revision at the row's last change
	Hseq     int64 // the place of its value, or of its clearing, in the execution's history
	Value    *graph.Value
	Attempt  *Attempt
}

// Env is what a step knows of the world beyond the execution: the time, how to name what it
// makes, and what this replica has heard. Nothing else goes in: a step reads no clock and no
// package state.
type Env struct {
	// Now is the write's time, the transaction's.
	Now time.Time
	// NewID returns the id of a new attempt: unique, and greater than those made before.
	NewID func() int64
	// NewToken returns a new claim token (ClaimLocally).
	NewToken func() string
	// Held: the execution's graph version is paused (PauseGraph), as this replica last heard: the
	// attempts the step makes wait PAUSED, as in a paused execution.
	Held bool
	// Traceparent is the W3C traceparent of the span of the write, or of the outcome being
	// recorded: the attempts made link to it. Nil if not traced.
	Traceparent *string
}

// Event is a change that happens to an execution. The events are the types of this file.
type Event interface{ event() }

// Start makes a new execution: advanced with no values, then given Values as one change (at
// revision 1), and advanced again.
type Start struct{ Values map[string]json.RawMessage }

// Set sets and unsets input values as one change (Runtime.Set, SetMany, Unset). With Defer, the
// gates are not evaluated: the write sets the values alone, and the execution is advanced after
// its commit (Advance); meanwhile its wake time is now (Plan.Wake), for whichever replica wakes
// it first. A write in an application's REPEATABLE READ or SERIALIZABLE transaction defers: the
// rows an advance would write may have changed since that transaction's snapshot.
type Set struct {
	Set   map[string]json.RawMessage
	Meta  json.RawMessage
	Unset []string
	Defer bool
}

// Outcome is how a claimed attempt ended: a success with Result, or a failure, Err. Claim is the
// attempt as claimed: its node, replica and token fence the outcome (ErrClaimLost).
type Outcome struct {
	Claim  *Attempt
	Err    error
	Result json.RawMessage
	// Used holds the upstream revisions the function read.
	Used map[string]int64
}

// Abandon abandons the running attempt of Node claimed with Token, for Reason (the sweep): it is
// retried, or its node fails. An attempt no longer running under Token is ErrNothingToDo.
type Abandon struct{ Node, Token, Reason string }

// Release hands back the running attempt of Node that Replica claimed with Token, at a graceful
// stop, once its function has returned: the claim moves to the attempts' history, where it keeps
// its place in its rate window, and a new attempt with the same number waits as a new one would.
// An attempt no longer running under the claim is ErrNothingToDo.
type Release struct{ Node, Replica, Token string }

// Cancel cancels the execution, for Reason: it stops for good.
type Cancel struct{ Reason string }

// Pause pauses the execution, or with Resume resumes it.
type Pause struct{ Resume bool }

// Archive archives the execution, or with Unarchive unarchives it.
type Archive struct{ Unarchive bool }

// Retry gives Node, failed for good, a new first attempt.
type Retry struct{ Node string }

// Advance evaluates the gates again: a tick has come due, or the graph's version changed.
type Advance struct{}

// ClaimLocally claims for Replica up to N of the AVAILABLE attempts the write made (Plan.Ready),
// with fresh tokens: the write's replica runs them at once, with no claim of its own.
type ClaimLocally struct {
	Replica string
	N       int
}

// Claim claims the AVAILABLE attempt of Node for Replica with Token: what Store.Claim's
// statement does for many at once (see Claimable).
type Claim struct{ Node, Replica, Token string }

// Promote makes the PENDING attempt of Node AVAILABLE: its run_at has come, and its key, limit or
// window has room (the promotion's statements decide that across executions; see Promotable).
type Promote struct{ Node string }

// HoldGraph pauses, or with Resume resumes, the execution's graph version (PauseGraph): what
// SetGraphPaused's statement does for every execution of the version (see GraphPausing).
type HoldGraph struct{ Resume bool }

// Wake tells a WAITING map node that its children have all ended: it becomes ready to collect
// them (see Wakes).
type Wake struct{ Node string }

// Revive makes ready the PAUSED attempts that nothing pauses any more: the execution is not
// paused, nor its graph version (see Revivable).
type Revive struct{}

// SweepArchived cancels the waiting attempts of an archived execution, which its archiving could
// not (see ArchivedWaiting).
type SweepArchived struct{}

func (Start) event()         {}
func (Set) event()           {}
func (Outcome) event()       {}
func (Abandon) event()       {}
func (Release) event()       {}
func (Cancel) event()        {}
func (Pause) event()         {}
func (Archive) event()       {}
func (Retry) event()         {}
func (Advance) event()       {}
func (ClaimLocally) event()  {}
func (Claim) event()         {}
func (Promote) event()       {}
func (HoldGraph) event()     {}
func (Wake) event()          {}
func (Revive) event()        {}
func (SweepArchived) event() {}

// Step plans event on x, as loaded, and returns the plan, which x's write applies. x is not
// changed. The error is the event's refusal (ErrNotInput, ErrInvalidValue, ErrNotFailed,
// ErrCanceled, ErrClaimLost, ErrNothingToDo, …): the plan is then as before the event, and the
// write applies nothing of it.
func Step(x *Loaded, ev Event, env Env) (*Plan, error) {
	p := Begin(x, env)
	err := p.Step(ev, env)
	return p, err
}

// Begin is the plan of a write on x, as loaded, before any event: it changes nothing. Its events
// follow (Plan.Step).
func Begin(x *Loaded, env Env) *Plan { return newPlan(x, env) }

// Step plans a further event of the same write on the plan's state: the next outcome of a batch,
// or the local claim of what the write made ready. env.Now is the write's, as before. If the
// event is refused, the error says why; a refusal of the events that check before they change
// anything (a lost claim, an attempt no longer to abandon or release) leaves the plan as it was.
func (p *Plan) Step(ev Event, env Env) error {
	p.env.Held, p.env.Traceparent = env.Held, env.Traceparent
	if env.NewID != nil {
		p.env.NewID, p.env.NewToken = env.NewID, env.NewToken
	}
	var err error
	switch ev := ev.(type) {
	case Start:
		err = p.start(ev.Values)
	case Set:
		err = p.setValues(ev)
	case Outcome:
		err = p.recordOutcome(ev)
	case Abandon:
		err = p.abandonClaim(ev)
	case Release:
		err = p.release(ev)
	case Cancel:
		p.cancel(ev.Reason)
	case Pause:
		err = p.pause(!ev.Resume)
	case Archive:
		err = p.archive(!ev.Unarchive)
	case Retry:
		err = p.retry(ev.Node)
	case Advance:
		err = p.advanceAlone()
	case ClaimLocally:
		p.claimLocally(ev.Replica, ev.N)
	case Claim:
		err = p.claim(ev)
	case Promote:
		err = p.promoteNode(ev.Node)
	case HoldGraph:
		p.asChange(func() { p.holdGraph(!ev.Resume) })
	case Wake:
		err = p.wake(ev.Node)
	case Revive:
		p.asChange(p.revive)
	case SweepArchived:
		p.asChange(p.sweepArchived)
	default:
		err = fmt.Errorf("machine: unknown event %T", ev)
	}
	if err == nil {
		p.settle()
	}
	return err
}
