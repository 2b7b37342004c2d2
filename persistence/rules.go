package persistence

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/journey-go/journey/graph"
)

// The rules of a write, with no SQL: each changes an execution's state (execState) in memory, as
// the graph says, and apply writes what they changed. See state.go.

// setValues records in st, loaded, the write of set, and advances the execution. It returns the
// execution's revision afterwards. A node that is not an input fails the write (ErrUnknownNode,
// ErrNotInput), and so does a value that would give a node a concurrency key that cannot be
// stored (ErrInvalidValue).
func (st *execState) setValues(set Setting) (int64, error) {
	st.caller, st.claims = true, true
	names := slices.Sorted(maps.Keys(set.Set))
	for _, name := range append(slices.Clone(names), set.Unset...) {
		if err := CheckInput(st.g, name); err != nil {
			return 0, err
		}
	}
	st.revision++ // every change below is at this revision; taken back if nothing changes
	changed := false
	for _, name := range names {
		changed = st.setValue(name, set.Set[name], set.Meta, st.revision) || changed
	}
	for _, name := range set.Unset {
		if st.values.Has(name) {
			st.clearValue(name)
			changed = true
		}
	}
	if !changed {
		st.revision--
		return st.revision, nil
	}
	st.changed = true
	err := st.advance()
	return st.revision, err
}

// advance evaluates every gate against the current values, until nothing changes:
//   - it clears the values of compute and mutate nodes whose gate no longer holds;
//   - it creates a computation for each compute, mutate or tick node whose gate holds and whose
//     upstream revisions differ from those of its newest attempt, and for each recurring tick whose
//     due time has passed;
//   - it records the tracked changes of historians, and archives the execution when an archive
//     node's gate holds.
//
// Gates see two views of the values. Whether a node may run is judged on the due view, where a
// tick counts as provided only once its time has come; whether a value must be cleared is judged
// on all values, where a tick counts once it is set at all, so a paused tick wipes nothing.
//
// An archived execution gets no new computations; Unarchive advances it again. A gate that panics
// fails its node, and the others advance as usual.
func (st *execState) advance() error {
	if st.exec.CanceledAt != nil {
		return nil // nothing new: values may still be set, and recorded
	}
	for again := true; again; {
		again = false
		due, all := st.withFailures(st.dueView()), st.withFailures(st.values)
		for n := range st.g.InOrder() {
			changed, err := st.advanceNode(n, due, all)
			if err != nil {
				if panicked := (*gatePanic)(nil); errors.As(err, &panicked) {
					before := st.latest[n.Name()]
					err = st.failNode(n, panicked.err)
					changed = st.latest[n.Name()] != before // a Failed gate may hold now
				}
				if err != nil {
					return err
				}
			}
			again = again || changed
		}
	}
	return nil
}

// gatePanic is a gate's panic on its way to failing the node.
type gatePanic struct{ err error }

func (p *gatePanic) Error() string { return p.err.Error() }

// advanceNode advances one node, and reports whether it changed a value that other gates read.
// due and all are the two views of the values (see advance).
func (st *execState) advanceNode(n graph.Node, due, all graph.Values) (bool, error) {
	name := n.Name()
	gate := func(vals graph.Values) (bool, error) {
		ok, err := holds(n, vals)
		if err != nil {
			return false, &gatePanic{err}
		}
		return ok, nil
	}
	switch n.Kind() {
	case graph.KindInput:
		return false, nil
	case graph.KindHistorian:
		if ok, err := gate(due); !ok {
			return false, err
		}
		return st.recordHistory(n)
	case graph.KindArchive:
		if ok, err := gate(due); !ok || st.values.Has(name) {
			return false, err
		}
		st.archiveByNode(name)
		return true, nil
	}
	if ok, err := gate(all); !ok {
		if err != nil || !clearable(n) || !st.values.Has(name) {
			return false, err
		}
		st.revision++
		st.clearValue(name)
		return true, nil
	}
	if ok, err := gate(due); !ok {
		return false, err
	}
	latest := st.latest[name]
	same := latest != nil && computedWith(latest.ComputedWith, n, due)
	if latest != nil && latest.active() && st.made[name] && !same {
		// An attempt that an earlier advance of this write made, which no one has seen, is made
		// again from the values as they are now: a batch of outcomes, recorded one by one, makes
		// its node's attempt once, from all of them.
		delete(st.latest, name)
		latest = nil
	}
	if latest != nil && latest.State == StateWaiting && !same && st.exec.ArchivedAt == nil {
		// A map node that waits for the children of values before: it is computed again at once,
		// and its new attempt ends them (see persistence/maps.go), rather than waiting for them.
		why := "canceled: node " + name + " was computed again for new values"
		latest.State, latest.Error, latest.FinishedAt = StateCanceled, &why, &st.now
		st.attemptChanged(latest)
	}
	if st.exec.ArchivedAt != nil || latest != nil && latest.active() {
		return false, nil
	}
	if latest != nil && same {
		if latest.failedForGood() {
			return false, nil // its attempts at these upstream revisions are used up
		}
		upToDate := st.values.Has(name) || !clearable(n)
		nextCycle := n.Kind() == graph.KindTickRecurring && st.tickDue(name)
		if latest.State == StateSuccess && upToDate && !nextCycle {
			return false, nil
		}
	}
	c, err := st.insertComputation(n, 1, signature(Signature(n, due)), 0)
	if err != nil {
		return false, err
	}
	if st.made == nil {
		st.made = map[string]bool{}
	}
	st.made[name] = true
	return c.failedForGood(), nil // a Failed gate may hold now
}

// failNode records that a node failed for good without running: its gate panicked. It does so
// once per upstream revisions, as a FAILED attempt with the cause, and claims the failure event.
// A node with an attempt under way is left to that attempt.
func (st *execState) failNode(n graph.Node, cause error) error {
	sig := signature(Signature(n, st.dueView()))
	latest := st.latest[n.Name()]
	if latest != nil && (latest.active() || latest.failedForGood() && sameSignature(latest.ComputedWith, sig)) {
		return nil
	}
	st.warn("user code panicked; the node has failed", "node", n.Name(), "error", cause)
	msg := storable(cause.Error())
	st.revision++
	c := &Computation{ExecutionID: st.exec.ID, GraphKey: st.graphKey(), Node: n.Name(),
		State: StateFailed, Attempt: 1, MaxAttempts: n.Settings().MaxAttempts, RunAt: st.now,
		AbandonAfterMS: n.Settings().AbandonAfter.Milliseconds(), HeartbeatTimeoutMS: n.Settings().HeartbeatTimeout.Milliseconds(),
		ComputedWith: sig.String(), Error: &msg, CreatedAt: st.now, FinishedAt: &st.now}
	st.newAttempt(c)
	st.nodeFailed(c, cause)
	return nil
}

// clearable reports whether invalidation clears the node's value. Historian, archive and tick
// values are never cleared, and neither are mutate targets, which are inputs.
func clearable(n graph.Node) bool {
	return n.Kind() == graph.KindCompute || n.Kind() == graph.KindMutate
}

// insertComputation creates an attempt, the node's current one. It is AVAILABLE at once, unless it
// must wait for delay, a concurrency key, a parallel limit or a rate limit: then it is PENDING,
// and a gated or rate-limited one is promoted before the transaction ends if a slot is free. In an
// archived execution it is CANCELED at once, until Unarchive revives it. If the node's
// ConcurrencyKey or RateKey panics, or returns a key that cannot be stored (see checkKey), the
// node fails; but a caller's write (st.caller) fails instead, with ErrInvalidValue.
func (st *execState) insertComputation(n graph.Node, attempt int, sig signature, delay time.Duration) (*Computation, error) {
	set := n.Settings()
	var key *string
	var keyErr error
	if set.ConcurrencyKey != nil {
		var k string
		if k, keyErr = st.keyOf(n, "ConcurrencyKey", set.ConcurrencyKey); errors.Is(keyErr, ErrInvalidValue) {
			return nil, keyErr
		}
		if k != "" && keyErr == nil {
			key = &k
		}
	}
	var rateKey *string
	if set.RateLimit > 0 && keyErr == nil {
		var k string
		if set.RateKey != nil {
			if k, keyErr = st.keyOf(n, "RateKey", set.RateKey); errors.Is(keyErr, ErrInvalidValue) {
				return nil, keyErr
			}
		}
		// The empty key is a key: without a RateKey, the node has one window.
		rateKey = &k
	}
	var maxParallel *int
	if set.MaxParallel > 0 {
		maxParallel = &set.MaxParallel
	}
	state := StateAvailable
	// An attempt's run_at is its place in the queue of ready work: when it became ready, less
	// its priority's head start (graph.Priority). A retry that keeps its place keeps the head
	// start it had; a delayed one is due at its time, and queued from then.
	runAt := st.now.Add(-time.Duration(int(st.exec.Priority)+set.Priority) * graph.PriorityStep)
	if st.requeueAt != nil && delay <= 0 {
		runAt = *st.requeueAt
	}
	var errText *string
	var finishedAt *time.Time
	switch {
	case keyErr != nil:
		msg := storable(keyErr.Error())
		state, errText, finishedAt = StateFailed, &msg, &st.now
	case st.exec.ArchivedAt != nil:
		reason := ReasonArchived
		state, errText, finishedAt = StateCanceled, &reason, &st.now
		if delay > 0 {
			runAt = st.now.Add(delay)
		}
	case st.exec.PausedAt != nil || st.held: // Resume or ResumeGraph makes it ready
		state = StatePaused
		if delay > 0 {
			runAt = st.now.Add(delay)
		}
	case delay > 0:
		state, runAt = StatePending, st.now.Add(delay)
	case key != nil || maxParallel != nil || rateKey != nil:
		state = StatePending
		st.promote = true
	}
	if keyErr != nil {
		rateKey = nil // it never starts: its node failed
	}
	c := &Computation{ExecutionID: st.exec.ID, GraphKey: st.graphKey(),
		Node: n.Name(), State: state, Attempt: attempt, MaxAttempts: set.MaxAttempts, RunAt: runAt,
		AbandonAfterMS: set.AbandonAfter.Milliseconds(), HeartbeatTimeoutMS: set.HeartbeatTimeout.Milliseconds(),
		ComputedWith: sig.String(), ConcurrencyKey: key, MaxParallel: maxParallel, Error: errText,
		CreatedAt: st.now, FinishedAt: finishedAt, Traceparent: st.traceparent, RateKey: rateKey}
	if state == StateAvailable {
		c.AvailableAt = &st.now
		st.work = true
	}
	st.newAttempt(c)
	if state == StateFailed {
		st.warn("the node's concurrency or rate key failed; the node has failed", "node", n.Name(), "error", keyErr)
		st.nodeFailed(c, keyErr)
	}
	return c, nil
}

// keyOf calls fn, node n's ConcurrencyKey or RateKey (option), for the execution's key. A panic, or
// a key that cannot be stored (see checkKey), is the error that fails the node; in a caller's write
// (st.caller), a key that cannot be stored is ErrInvalidValue instead, which fails the write.
func (st *execState) keyOf(n graph.Node, option string, fn func(graph.Values) string) (string, error) {
	k, err := recovered("the "+option+" of node "+quote(n.Name()), func() string { return fn(st.values) })
	if bad := checkKey(k); err == nil && bad != nil {
		err = fmt.Errorf("the %s of node %s returned a key that cannot be stored: %w; "+
			"a key is valid UTF-8 with no NUL character, at most %d bytes", option, quote(n.Name()), bad, maxKeyBytes)
		if st.caller {
			return "", fmt.Errorf("%w: %w", ErrInvalidValue, err)
		}
	}
	return k, err
}

// holdsClaim reports whether c, a claimed attempt, is still its node's current attempt, RUNNING
// under the same claim: the fence of its outcome.
func (st *execState) holdsClaim(c *Computation) bool {
	cur := st.latest[c.Node]
	return cur != nil && cur.State == StateRunning && deref(cur.ClaimToken) == deref(c.ClaimToken) &&
		deref(cur.ReplicaID) == deref(c.ReplicaID)
}

// recordOne records one fenced outcome o in its execution's state, and advances the execution.
func (st *execState) recordOne(o Outcome) error {
	c := st.latest[o.C.Node]
	st.revision++
	st.promote = st.promote || c.gated() // its slot is free
	finishedAt := st.now
	c.FinishedAt = &finishedAt
	if o.Err != nil {
		c.State = StateFailed
		msg := storable(o.Err.Error())
		c.Error = &msg
		st.attemptChanged(c)
		if err := st.afterFailure(c, o.Err, graph.IsPermanent(o.Err)); err != nil {
			return err
		}
		return st.advance() // a Failed gate may hold now
	}
	c.State = StateSuccess
	if o.Used != nil {
		c.ComputedWith = signature(o.Used).String()
	}
	st.attemptChanged(c)
	st.forgetUndueTicks(c)
	n, _ := st.g.Node(c.Node)
	ok, err := holds(n, st.withFailures(st.values))
	switch {
	case err != nil:
		st.gatePanicked(c, err)
	case !ok:
		st.cancelAttempt(c, "canceled: gate no longer holds")
	case n.Kind() == graph.KindMutate:
		if err := st.mutate(n, o.Result); err != nil {
			return err
		}
	default:
		st.setValue(c.Node, o.Result, nil, st.revision)
	}
	return st.advance()
}

// forgetUndueTicks drops from a finished attempt's upstream revisions each tick whose value it
// read before that value came due: a recurring tick's next cycle, written while the attempt ran.
// For the attempt, that cycle has not happened yet; it must run again when it does. Gates and
// signatures see ticks only once they are due, so the attempt's record must too.
func (st *execState) forgetUndueTicks(c *Computation) {
	if len(st.dueView()) == len(st.values) {
		return // no tick waits
	}
	sig := parseSignature(c.ComputedWith)
	forgot := false
	for up, rev := range sig {
		if n, ok := st.g.Node(up); ok && isTick(n) && st.values[up].Revision == rev && !st.tickDue(up) {
			delete(sig, up)
			forgot = true
		}
	}
	if forgot {
		c.ComputedWith = sig.String()
		st.attemptChanged(c)
	}
}

// cancelAttempt marks a finished attempt CANCELED, with reason.
func (st *execState) cancelAttempt(c *Computation, reason string) {
	reason = storable(reason)
	c.State, c.Error = StateCanceled, &reason
	st.attemptChanged(c)
}

// failAttempt turns a finished attempt into the node's final failure, with cause: user code
// that the store called for it panicked.
func (st *execState) failAttempt(c *Computation, cause error) {
	st.warn("user code panicked; the node has failed", "node", c.Node, "error", cause)
	msg := storable(cause.Error())
	c.State, c.Error = StateFailed, &msg
	st.attemptChanged(c)
	st.nodeFailed(c, cause)
}

// gatePanicked fails the node of a finished attempt whose gate panicked on the current values.
// The failure is for those values, whichever the attempt read, so that advancing records it once.
func (st *execState) gatePanicked(c *Computation, cause error) {
	n, _ := st.g.Node(c.Node)
	c.ComputedWith = signature(Signature(n, st.dueView())).String()
	st.failAttempt(c, cause)
}

// afterFailure follows a failed or abandoned attempt. If the node's gate no longer holds, the
// attempt is CANCELED: nothing retries it and no failure is announced; the node runs again when
// its gate next holds. Otherwise, while attempts remain and the failure is not permanent, the next
// attempt is created with the node's backoff; else the node has failed for good.
func (st *execState) afterFailure(c *Computation, cause error, permanent bool) error {
	n, ok := st.g.Node(c.Node)
	if !ok {
		return fmt.Errorf("%w: graph %q has no node %q", ErrUnknownNode, st.g.Name(), c.Node)
	}
	ok, err := holds(n, st.withFailures(st.values))
	switch {
	case err != nil:
		st.gatePanicked(c, err)
		return nil
	case !ok:
		st.cancelAttempt(c, "canceled: gate no longer holds; "+deref(c.Error))
		return nil
	case permanent || c.Attempt >= c.MaxAttempts:
		st.nodeFailed(c, cause)
		return nil
	}
	backoff, err := recovered("the Backoff of node "+quote(c.Node), func() time.Duration { return n.Settings().Backoff(c.Attempt) })
	if err != nil {
		st.failAttempt(c, fmt.Errorf("%s; then %w", deref(c.Error), err))
		return nil
	}
	_, err = st.insertComputation(n, c.Attempt+1, parseSignature(c.ComputedWith), backoff)
	return err
}

// nodeFailed records that c, the newest attempt of its node, ended the node's budget: waiters
// learn it, the failure event is claimed, and OnSave gets the error.
func (st *execState) nodeFailed(c *Computation, cause error) {
	st.changed = true
	st.claimEvent(EventFailed)
	n, _ := st.g.Node(c.Node)
	if n.Settings().OnSave != nil || st.g.OnSave() != nil {
		st.saved = append(st.saved, graph.SaveEvent{
			ExecutionID: st.exec.ID, Graph: st.g.Name(), Node: c.Node,
			Err: fmt.Errorf("node %q %s: %w", c.Node, Failure(c.State, c.Attempt, c.MaxAttempts, deref(c.Error)), cause),
		})
	}
}

// mutate writes a mutate node's result into its targets. By default a target keeps its revision,
// so nothing downstream recomputes; with UpdateRevisionOnChange, a target whose value changed gets
// the completion's revision. The node's own value records what it wrote.
func (st *execState) mutate(n graph.Node, result json.RawMessage) error {
	targets := n.Targets()
	for _, target := range targets {
		rev := st.revision
		if old, ok := st.values[target]; ok && !n.Settings().UpdateRevisionOnChange {
			rev = old.Revision
		}
		st.setValue(target, result, nil, rev)
	}
	own, err := json.Marshal(map[string]any{"mutated": targets, "value": result})
	if err != nil {
		return fmt.Errorf("recording mutate %q: %w", n.Name(), err)
	}
	st.setValue(n.Name(), own, nil, st.revision)
	return nil
}

// abandon records that the current attempt c of its node was abandoned, for reason, and retries
// it or fails its node.
func (st *execState) abandon(c *Computation, reason string) error {
	st.revision++
	// Its slot is free: promoted now if the promotion lock is free, or else by the pass's
	// promotion after its abandonments, not after each of them, so that the lock cannot hold up
	// the retries of the work of a dead replica.
	st.promote, st.promoteByCaller = c.gated(), true
	finishedAt := st.now
	msg := storable(reason)
	c.State, c.Error, c.FinishedAt = StateAbandoned, &msg, &finishedAt
	st.attemptChanged(c)
	// Its retry, if it has no backoff, keeps its place in the queue: the work has been due since
	// its run_at, and it waited its turn once already. Behind a backlog, a retry at the back of
	// the queue would wait for all of it a second time, after a replica's death.
	st.requeueAt = &c.RunAt
	err := st.afterFailure(c, fmt.Errorf("%s: %w", reason, errAbandoned), false)
	st.requeueAt = nil
	if err != nil {
		return err
	}
	return st.advance() // a Failed gate may hold now
}

// archive archives or unarchives the execution st. Archiving cancels its PENDING and AVAILABLE
// attempts, so that no gating slot stays held by work that will never be claimed; its RUNNING
// attempts finish, or are abandoned, as usual. Unarchiving revives what archiving canceled, and
// advances the execution for what changed meanwhile.
func (st *execState) archive(archived bool) error {
	if (st.exec.ArchivedAt != nil) == archived {
		return nil
	}
	st.revision++
	st.changed = true
	st.setArchived(archived)
	if archived {
		return nil
	}
	return st.advance()
}

// setArchived archives or unarchives the execution, and cancels or revives its waiting attempts.
func (st *execState) setArchived(archived bool) {
	st.exec.ArchivedAt = nil
	if archived {
		st.exec.ArchivedAt = &st.now
	}
	st.cold = true
	for _, name := range slices.Sorted(maps.Keys(st.latest)) {
		c := st.latest[name]
		switch {
		case archived && (c.State == StatePending || c.State == StateAvailable || c.State == StatePaused):
			reason := ReasonArchived
			st.promote = st.promote || c.gated() // an AVAILABLE one held a slot
			c.State, c.Error, c.FinishedAt = StateCanceled, &reason, &st.now
			st.attemptChanged(c)
		case !archived && c.State == StateCanceled && c.Error != nil && *c.Error == ReasonArchived:
			c.Error, c.FinishedAt = nil, nil
			st.makeReady(c)
		}
	}
}

// makeReady makes c, a waiting attempt, AVAILABLE, or PENDING for its time, its gating or its rate
// limit, or PAUSED while the execution is.
func (st *execState) makeReady(c *Computation) {
	c.State, c.AvailableAt = StateAvailable, &st.now
	switch {
	case st.exec.PausedAt != nil || st.held:
		c.State = StatePaused
	case c.RunAt.After(st.now) || c.waits():
		c.State = StatePending
	}
	st.work = st.work || c.State == StateAvailable
	st.promote = st.promote || c.waits()
	st.attemptChanged(c)
}

// pause pauses or resumes the execution, unless it is so already, or canceled. Pausing makes its
// waiting attempts PAUSED, which no claim or promotion reads (an AVAILABLE gated one frees its
// slot); the attempts made while it is paused are PAUSED too, ticks that come due included; its
// running attempts run on. Resuming makes them ready again, each keeping its run_at, and so its
// place in the queue, and advances the execution. It reports whether it changed anything.
func (st *execState) pause(paused bool) (bool, error) {
	if (st.exec.PausedAt != nil) == paused || st.exec.CanceledAt != nil {
		return false, nil
	}
	st.revision++
	st.changed, st.cold = true, true
	st.exec.PausedAt = nil
	if paused {
		st.exec.PausedAt = &st.now
	}
	for _, name := range slices.Sorted(maps.Keys(st.latest)) {
		switch c := st.latest[name]; {
		case paused && (c.State == StatePending || c.State == StateAvailable):
			st.promote = st.promote || c.gated() && c.State == StateAvailable
			c.State = StatePaused
			st.attemptChanged(c)
		case !paused && c.State == StatePaused:
			st.makeReady(c)
		}
	}
	if paused {
		return true, nil
	}
	return true, st.advance()
}

// cancel cancels the execution for reason: its waiting and running attempts end CANCELED, which
// frees their slots and fences out the running ones' outcomes; nothing new is made (advance), and
// the canceled event is claimed. It reports whether it canceled: a canceled execution stays as it is.
func (st *execState) cancel(reason string) bool {
	if st.exec.CanceledAt != nil {
		return false
	}
	reason = storable(reason)
	st.revision++
	st.changed, st.cold = true, true
	st.exec.CanceledAt, st.exec.CancelReason = &st.now, &reason
	why := storable("canceled: " + reason)
	for _, name := range slices.Sorted(maps.Keys(st.latest)) {
		if c := st.latest[name]; c.active() {
			st.promote = st.promote || c.gated()
			c.State, c.Error, c.FinishedAt = StateCanceled, &why, &st.now
			st.attemptChanged(c)
		}
	}
	st.claimEvent(EventCanceled)
	return true
}

// retry gives node of the execution st, which has failed for good, a new first attempt, and
// re-arms the failure notification.
func (st *execState) retry(node string) error {
	n, ok := st.g.Node(node)
	if !ok {
		return fmt.Errorf("%w: graph %q has no node %q", ErrUnknownNode, st.g.Name(), node)
	}
	if st.exec.CanceledAt != nil {
		return fmt.Errorf("%w: execution %s is canceled; nothing of it runs again", ErrCanceled, st.exec.ID)
	}
	latest := st.latest[node]
	if latest == nil || !latest.failedForGood() {
		return fmt.Errorf("%w: node %q of %s; only a node that failed for good can be retried", ErrNotFailed, node, st.exec.ID)
	}
	st.revision++
	if _, err := st.insertComputation(n, 1, signature(Signature(n, st.dueView())), 0); err != nil {
		return err
	}
	st.changed = true
	// A new failure phase: a later failure is notified again.
	st.exec.FailurePhase++
	st.cold = true
	return st.advance() // a Failed gate on the node no longer holds
}

// tickDue reports whether a tick node has a value whose time has come.
func (st *execState) tickDue(name string) bool {
	t, ok := tickTime(st.values[name])
	return ok && !t.After(st.now)
}

// dueView is the values as gates see them to decide whether a node may run: a tick is provided
// only once it is due. It is the values themselves when no tick waits, as in most writes (a gate
// does not change them).
func (st *execState) dueView() graph.Values {
	var due graph.Values
	for name := range st.values {
		if n, _ := st.g.Node(name); isTick(n) && !st.tickDue(name) {
			if due == nil {
				due = maps.Clone(st.values)
			}
			delete(due, name)
		}
	}
	if due == nil {
		return st.values
	}
	return due
}

// withFailures returns vals as gates and functions see them: each node that has failed for good
// is marked Failed, with its error (see graph.Value.Failed). It is vals itself when none has.
func (st *execState) withFailures(vals graph.Values) graph.Values {
	var out graph.Values
	for name, c := range st.latest {
		if !c.failedForGood() {
			continue
		}
		if out == nil {
			out = maps.Clone(vals)
		}
		v := out[name]
		v.Failed, v.Error = true, deref(c.Error)
		out[name] = v
	}
	if out == nil {
		return vals
	}
	return out
}

// nextWake is the earliest time a tick of the execution comes due, nil if none is waiting.
func (st *execState) nextWake() *time.Time {
	var next *time.Time
	for name, v := range st.values {
		if n, _ := st.g.Node(name); !isTick(n) {
			continue
		}
		if t, ok := tickTime(v); ok && t.After(st.now) && (next == nil || t.Before(*next)) {
			next = &t
		}
	}
	return next
}

// recordHistory adds an entry to a historian, whose gate holds, for each tracked node whose
// revision went up, newest first, keeping at most MaxEntries. It reports whether the historian
// changed.
func (st *execState) recordHistory(n graph.Node) (bool, error) {
	var entries []HistoryEntry
	seen := historianSeen{Seen: map[string]int64{}}
	if v, ok := st.values[n.Name()]; ok {
		if err := json.Unmarshal(v.Raw, &entries); err != nil {
			return false, fmt.Errorf("reading historian %q: %w", n.Name(), err)
		}
		if len(v.Metadata) > 0 {
			if err := json.Unmarshal(v.Metadata, &seen); err != nil {
				return false, fmt.Errorf("reading historian %q: %w", n.Name(), err)
			}
		}
	}
	var added []HistoryEntry
	for up := range n.Upstreams() {
		v, ok := st.values[up]
		if !ok || v.Revision <= seen.Seen[up] {
			continue
		}
		seen.Seen[up] = v.Revision
		added = append(added, HistoryEntry{Node: up, Value: v.Raw, Metadata: v.Metadata, Revision: v.Revision, At: v.SetAt})
	}
	if len(added) == 0 {
		return false, nil
	}
	slices.SortStableFunc(added, func(a, b HistoryEntry) int { return int(b.Revision - a.Revision) })
	entries = append(added, entries...)
	if max := n.Settings().MaxEntries; len(entries) > max {
		entries = entries[:max]
	}
	raw, err := json.Marshal(entries)
	if err != nil {
		return false, fmt.Errorf("writing historian %q: %w", n.Name(), err)
	}
	meta, err := json.Marshal(seen)
	if err != nil {
		return false, fmt.Errorf("writing historian %q: %w", n.Name(), err)
	}
	st.revision++
	return st.setValue(n.Name(), raw, meta, st.revision), nil
}

// archiveByNode archives the execution, as an archive node whose gate holds does. The node's
// value is the time of archiving, in Unix milliseconds.
func (st *execState) archiveByNode(name string) {
	st.revision++
	st.setValue(name, json.RawMessage(strconv.FormatInt(st.now.UnixMilli(), 10)), nil, st.revision)
	st.setArchived(true)
}

// failedNodes are the nodes whose latest attempt ended their budget, by name.
func (st *execState) failedNodes() []FailedNode {
	out := []FailedNode{}
	for _, c := range st.latest {
		if c.failedForGood() {
			f := FailedNode{Node: c.Node, Attempts: c.Attempt}
			if c.Error != nil {
				f.Error = *c.Error
			}
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(a, b FailedNode) int { return cmp.Compare(a.Node, b.Node) })
	return out
}

// claimEvent claims an event of the execution, once per phase whichever replicas race: apply
// writes the claim, and its deliveries, in the transaction of the change that caused it. A
// failure keeps the nodes that had failed, for the event to report at every delivery.
func (st *execState) claimEvent(event string) {
	e := eventClaim{Event: event}
	if event == EventFailed {
		e.Phase = st.exec.FailurePhase
		b, _ := json.Marshal(st.failedNodes()) // strings and ints always encode
		e.FailedNodes = string(b)
	}
	for _, prior := range st.events {
		if prior.Event == e.Event && prior.Phase == e.Phase {
			return // the first claim of the write holds, as the first of the phase does
		}
	}
	st.events = append(st.events, e)
}

// claimCompletion claims the completed event once the graph's CompletesWhen gate holds and
// nothing is pending or running.
func (st *execState) claimCompletion() {
	gate := st.g.CompletesWhen()
	if gate == nil || st.exec.CanceledAt != nil || !gate.Holds(st.withFailures(st.dueView())) {
		return
	}
	for _, c := range st.latest {
		if c.active() {
			return
		}
	}
	st.claimEvent(EventCompleted)
}
