package machine

import (
	"strings"
	"time"
)

// The table of states. An attempt's state moves along PENDING → AVAILABLE → RUNNING → SUCCESS |
// FAILED | ABANDONED | CANCELED, with PAUSED beside PENDING and AVAILABLE, and WAITING beside
// RUNNING for a map node whose children run. The rules of Step read the conditions below, and
// the statements that stay set-based for speed (the claim, the promotions, a graph version's
// pause and resume, the wake of a map node, the sweep's cancel of archived work) take their
// predicates from the same conditions, written as SQL: each condition is written once in Go and
// once in SQL, side by side, and a test runs every combination of states through both.

// A Cond is a condition on an attempt (a node row, alias n in SQL) of an execution (alias e), at
// a time (now).
type Cond struct {
	Name string
	Go   func(e *Execution, a *Attempt, now time.Time) bool
	// SQL is the condition in SQL, with {n}, {e} and {now} for the node row, the execution and
	// the time.
	SQL string
}

// The conditions.
var (
	// Archived: the execution is archived.
	Archived = Cond{"archived", func(e *Execution, _ *Attempt, _ time.Time) bool { return e.ArchivedAt != nil },
		"{e}.archived_at IS NOT NULL"}
	// Canceled: the execution is canceled.
	Canceled = Cond{"canceled", func(e *Execution, _ *Attempt, _ time.Time) bool { return e.CanceledAt != nil },
		"{e}.canceled_at IS NOT NULL"}
	// Paused: the execution is paused.
	Paused = Cond{"paused", func(e *Execution, _ *Attempt, _ time.Time) bool { return e.PausedAt != nil },
		"{e}.paused_at IS NOT NULL"}
	// Live: the execution may run work: neither archived, canceled nor paused.
	Live = Cond{"live", func(e *Execution, a *Attempt, now time.Time) bool {
		return !Archived.Go(e, a, now) && !Canceled.Go(e, a, now) && !Paused.Go(e, a, now)
	}, "{e}.archived_at IS NULL AND {e}.canceled_at IS NULL AND {e}.paused_at IS NULL"}
	// Due: the attempt's run_at has come.
	Due = Cond{"due", func(_ *Execution, a *Attempt, now time.Time) bool { return !a.RunAt.After(now) },
		"{n}.run_at <= {now}"}
	// Waits: once due, the attempt waits for a promotion: a concurrency key, a parallel limit or
	// a rate limit.
	Waits = Cond{"waits", func(_ *Execution, a *Attempt, _ time.Time) bool { return a.Waits() },
		"({n}.concurrency_key IS NOT NULL OR {n}.max_parallel IS NOT NULL OR {n}.rate_key IS NOT NULL)"}
	// Unwaiting: once due, the attempt waits for nothing.
	Unwaiting = Cond{"unwaiting", func(e *Execution, a *Attempt, now time.Time) bool { return !Waits.Go(e, a, now) },
		"{n}.concurrency_key IS NULL AND {n}.max_parallel IS NULL AND {n}.rate_key IS NULL"}
)

// InState is the condition that the attempt is in one of states.
func InState(states ...string) Cond {
	quoted := make([]string, len(states))
	for i, s := range states {
		quoted[i] = "'" + s + "'"
	}
	return Cond{"state in " + strings.Join(states, ","), func(_ *Execution, a *Attempt, _ time.Time) bool {
		for _, s := range states {
			if a.State == s {
				return true
			}
		}
		return false
	}, "{n}.state IN (" + strings.Join(quoted, ", ") + ")"}
}

// A Rule is a conjunction of conditions: the attempts a set-based statement may move.
type Rule []Cond

// Holds reports whether every condition of r holds.
func (r Rule) Holds(e *Execution, a *Attempt, now time.Time) bool {
	for _, c := range r {
		if !c.Go(e, a, now) {
			return false
		}
	}
	return true
}

// SQL is r as SQL, for node row n of execution e at time now (SQL expressions).
func (r Rule) SQL(n, e, now string) string {
	parts := make([]string, len(r))
	for i, c := range r {
		parts[i] = "(" + render(c.SQL, n, e, now) + ")"
	}
	return strings.Join(parts, " AND ")
}

func render(sql, n, e, now string) string {
	return strings.NewReplacer("{n}", n, "{e}", e, "{now}", now).Replace(sql)
}

// The rules of the set-based statements.
var (
	// Claimable: an attempt a claim may take (Store.Claim; Step's Claim). The claim takes only
	// the graph versions that are not paused, as the replica last heard.
	Claimable = Rule{InState(StateAvailable), Live}
	// PromotableUngated: a PENDING attempt whose time has come and that waits for nothing else
	// (a retry's backoff has passed), which a promotion makes AVAILABLE.
	PromotableUngated = Rule{InState(StatePending), Due, Unwaiting, Live}
	// PromotableGated: a PENDING attempt whose time has come and that waits for a key, a limit or
	// a rate window, which the gated promotion makes AVAILABLE if its key, limit and window have
	// room.
	PromotableGated = Rule{InState(StatePending), Due, Waits, Live}
	// ArchivedWaiting: a waiting attempt of an archived execution, which archiving cancels
	// (ReasonArchived), and the sweep after it, should a replica that had not heard make one.
	ArchivedWaiting = Rule{InState(StatePending, StateAvailable, StatePaused), Archived}
	// GraphPausing: an attempt that a pause of its graph version makes PAUSED.
	GraphPausing = Rule{InState(StatePending, StateAvailable)}
	// Revivable: a PAUSED attempt whose execution is not paused: its graph version resumed, it
	// is made ready (Ready).
	Revivable = Rule{InState(StatePaused), Cond{"not paused", func(e *Execution, _ *Attempt, _ time.Time) bool {
		return e.PausedAt == nil
	}, "{e}.paused_at IS NULL"}}
	// Wakes: a WAITING map node whose children have all ended, made ready (Ready) to collect them.
	Wakes = Rule{InState(StateWaiting)}
	// Held: a running attempt, which its claim holds until its outcome, its release or its
	// abandonment: Step's Abandon takes it, and so does the sweep's abandonment of an attempt
	// alone, without its execution (Store.abandonAlone), each under the attempt's claim.
	Held = Rule{InState(StateRunning)}
	// Waitable: a running map node of an execution that is not canceled, which waits for the
	// children it started (Store.WaitChildren, WAITING) under its claim. A canceled execution's
	// map node ends CANCELED instead, as every outcome there does.
	Waitable = Rule{InState(StateRunning), Cond{"not canceled", func(e *Execution, a *Attempt, now time.Time) bool {
		return !Canceled.Go(e, a, now)
	}, "{e}.canceled_at IS NULL"}}
)

// A readyCase is one case of Ready: if its condition holds, the attempt takes its state.
type readyCase struct {
	when  Cond
	state string
}

// ready are the cases of Ready, in order; the last always holds.
var ready = []readyCase{
	{Canceled, StateCanceled},
	{Archived, StateCanceled},
	{Paused, StatePaused},
	{Cond{"not due or waits", func(e *Execution, a *Attempt, now time.Time) bool {
		return !Due.Go(e, a, now) || Waits.Go(e, a, now)
	}, "NOT (" + Due.SQL + ") OR " + Waits.SQL}, StatePending},
	{Cond{"else", func(*Execution, *Attempt, time.Time) bool { return true }, "true"}, StateAvailable},
}

// Ready is the state of a waiting attempt a of execution e made ready at now (a new attempt, a
// resume, an unarchive, a release, a map node's wake): CANCELED in a canceled or archived
// execution, PAUSED in a paused one (or, held, in a paused graph version), PENDING until its time
// or while it waits for a key, a limit or a window, else AVAILABLE.
func Ready(e *Execution, a *Attempt, now time.Time, held bool) string {
	for _, c := range ready {
		if c.when.Go(e, a, now) {
			if held && (c.state == StatePending || c.state == StateAvailable) {
				return StatePaused
			}
			return c.state
		}
	}
	panic("unreachable: the last case of ready always holds")
}

// ReadySQL is Ready as a SQL expression, for node row n of execution e at time now. A statement
// knows no replica's view of the paused graph versions: it takes only the attempts of versions
// that run, or leaves what it makes ready to the claims, which skip the paused versions.
func ReadySQL(n, e, now string) string {
	var b strings.Builder
	b.WriteString("CASE")
	for _, c := range ready[:len(ready)-1] {
		b.WriteString(" WHEN " + render(c.when.SQL, n, e, now) + " THEN '" + c.state + "'")
	}
	b.WriteString(" ELSE '" + ready[len(ready)-1].state + "' END")
	return b.String()
}

// ReadyErrorSQL is the error of an attempt made ready as ReadySQL says: the reason of a cancel,
// NULL for any other state.
func ReadyErrorSQL(e string) string {
	return "CASE WHEN " + render(Canceled.SQL, "", e, "") + " THEN 'canceled: ' || " + e + ".cancel_reason" +
		" WHEN " + render(Archived.SQL, "", e, "") + " THEN '" + ReasonArchived + "' END"
}

// readyError is the error of an attempt made ready in e as Ready says: the reason of a cancel.
func readyError(e *Execution, state string) *string {
	if state != StateCanceled {
		return nil
	}
	why := ReasonArchived
	if e.CanceledAt != nil {
		why = Storable("canceled: " + deref(e.CancelReason))
	}
	return &why
}
