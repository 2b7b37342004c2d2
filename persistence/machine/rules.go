package machine

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

// The rules of the events, with no SQL: each changes the plan's state of the execution, as the
// graph says, and the applier writes what they changed. See plan.go and step.go.

// start advances a new execution with no values, then gives it values, if any, as one change,
// and advances it again. A new execution's state is known without loading it: no one else sees
// it before its write commits.
func (p *Plan) start(values map[string]json.RawMessage) error {
	p.caller = true
	if err := p.advance(); err != nil {
		return err
	}
	if len(values) > 0 {
		p.revision++
		for _, name := range slices.Sorted(maps.Keys(values)) {
			p.setValue(name, values[name], nil, p.revision)
		}
		if err := p.advance(); err != nil {
			return err
		}
	}
	p.changed = false // no one can be waiting on an execution before it exists
	return nil
}

// setValues records the write of set, and advances the execution. A node that is not an input
// fails the write (ErrUnknownNode, ErrNotInput), and so does a value that would give a node a
// concurrency key that cannot be stored (ErrInvalidValue). Values equal to the stored ones (and
// with the same metadata) change nothing.
func (p *Plan) setValues(set Set) error {
	p.caller = true
	names := slices.Sorted(maps.Keys(set.Set))
	for _, name := range append(slices.Clone(names), set.Unset...) {
		if err := CheckInput(p.g, name); err != nil {
			return err
		}
	}
	p.revision++ // every change below is at this revision; taken back if nothing changes
	changed := false
	for _, name := range names {
		changed = p.setValue(name, set.Set[name], set.Meta, p.revision) || changed
	}
	for _, name := range set.Unset {
		if p.values.Has(name) {
			p.clearValue(name)
			changed = true
		}
	}
	if !changed {
		p.revision--
		return nil
	}
	p.changed = true
	if set.Defer {
		p.deferred = true
		return nil
	}
	return p.advance()
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
func (p *Plan) advance() error {
	if p.exec.CanceledAt != nil {
		return nil // nothing new: values may still be set, and recorded
	}
	for again := true; again; {
		again = false
		due, all := p.withFailures(p.dueView()), p.withFailures(p.values)
		for n := range p.g.InOrder() {
			changed, err := p.advanceNode(n, due, all)
			if err != nil {
				if panicked := (*gatePanic)(nil); errors.As(err, &panicked) {
					before := p.latest[n.Name()]
					err = p.failNode(n, panicked.err)
					changed = p.latest[n.Name()] != before // a Failed gate may hold now
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

// advanceAlone advances the execution as a change of its own, at the next revision if it changes
// anything: a tick has come due, a version moved, a Set's advance followed its commit.
func (p *Plan) advanceAlone() error {
	var err error
	p.asChange(func() { err = p.advance() })
	return err
}

// asChange runs fn as a change of its own: at the next revision, which it takes back if fn
// changes no row.
func (p *Plan) asChange(fn func()) {
	touches := p.touches
	p.revision++
	fn()
	if p.touches == touches {
		p.revision--
	}
}

// gatePanic is a gate's panic on its way to failing the node.
type gatePanic struct{ err error }

func (p *gatePanic) Error() string { return p.err.Error() }

// advanceNode advances one node, and reports whether it changed a value that other gates read.
// due and all are the two views of the values (see advance).
func (p *Plan) advanceNode(n graph.Node, due, all graph.Values) (bool, error) {
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
		return p.recordHistory(n)
	case graph.KindArchive:
		if ok, err := gate(due); !ok || p.values.Has(name) {
			return false, err
		}
		p.archiveByNode(name)
		return true, nil
	}
	if ok, err := gate(all); !ok {
		if err != nil || !clearable(n) || !p.values.Has(name) {
			return false, err
		}
		p.revision++
		p.clearValue(name)
		return true, nil
	}
	if ok, err := gate(due); !ok {
		return false, err
	}
	latest := p.latest[name]
	same := latest != nil && computedWith(latest.ComputedWith, n, due)
	if latest != nil && latest.Active() && p.made[name] && !same {
		// An attempt that an earlier advance of this write made, which no one has seen, is made
		// again from the values as they are now: a batch of outcomes, recorded one by one, makes
		// its node's attempt once, from all of them.
		delete(p.latest, name)
		latest = nil
	}
	if latest != nil && latest.State == StateWaiting && !same && p.exec.ArchivedAt == nil {
		// A map node that waits for the children of values before: it is computed again at once,
		// and its new attempt ends them (see persistence/maps.go), rather than waiting for them.
		why := "canceled: node " + name + " was computed again for new values"
		latest.State, latest.Error, latest.FinishedAt = StateCanceled, &why, &p.now
		p.attemptChanged(latest)
	}
	if p.exec.ArchivedAt != nil || latest != nil && latest.Active() {
		return false, nil
	}
	if latest != nil && same {
		if latest.FailedForGood() {
			return false, nil // its attempts at these upstream revisions are used up
		}
		upToDate := p.values.Has(name) || !clearable(n)
		nextCycle := n.Kind() == graph.KindTickRecurring && p.tickDue(name)
		if latest.State == StateSuccess && upToDate && !nextCycle {
			return false, nil
		}
	}
	c, err := p.insertComputation(n, 1, signature(Signature(n, due)), 0)
	if err != nil {
		return false, err
	}
	if p.made == nil {
		p.made = map[string]bool{}
	}
	p.made[name] = true
	return c.FailedForGood(), nil // a Failed gate may hold now
}

// failNode records that a node failed for good without running: its gate panicked. It does so
// once per upstream revisions, as a FAILED attempt with the cause, and claims the failure event.
// A node with an attempt under way is left to that attempt.
func (p *Plan) failNode(n graph.Node, cause error) error {
	sig := signature(Signature(n, p.dueView()))
	latest := p.latest[n.Name()]
	if latest != nil && (latest.Active() || latest.FailedForGood() && sameSignature(latest.ComputedWith, sig)) {
		return nil
	}
	p.warn("user code panicked; the node has failed", "node", n.Name(), "error", cause)
	msg := Storable(cause.Error())
	p.revision++
	c := &Attempt{ExecutionID: p.exec.ID, GraphKey: p.x.GraphKey, Node: n.Name(),
		State: StateFailed, Attempt: 1, MaxAttempts: n.Settings().MaxAttempts, RunAt: p.now,
		AbandonAfterMS: n.Settings().AbandonAfter.Milliseconds(), HeartbeatTimeoutMS: n.Settings().HeartbeatTimeout.Milliseconds(),
		ComputedWith: sig.String(), Error: &msg, CreatedAt: p.now, FinishedAt: &p.now}
	p.newAttempt(c)
	p.nodeFailed(c, cause)
	return nil
}

// clearable reports whether invalidation clears the node's value. Historian, archive and tick
// values are never cleared, and neither are mutate targets, which are inputs.
func clearable(n graph.Node) bool {
	return n.Kind() == graph.KindCompute || n.Kind() == graph.KindMutate
}

// insertComputation creates an attempt, the node's current one, made ready as the table says
// (Ready): AVAILABLE at once, unless it must wait for delay, a concurrency key, a parallel limit or
// a rate limit: then it is PENDING, and a gated or rate-limited one is promoted before the
// transaction ends if a slot is free. In an archived execution it is CANCELED at once, until
// Unarchive revives it; in a paused one, PAUSED until Resume. If the node's
// ConcurrencyKey or RateKey panics, or returns a key that cannot be stored (see checkKey), the
// node fails; but a caller's write (p.caller) fails instead, with ErrInvalidValue.
func (p *Plan) insertComputation(n graph.Node, attempt int, sig signature, delay time.Duration) (*Attempt, error) {
	set := n.Settings()
	var key *string
	var keyErr error
	if set.ConcurrencyKey != nil {
		var k string
		if k, keyErr = p.keyOf(n, "ConcurrencyKey", set.ConcurrencyKey); errors.Is(keyErr, ErrInvalidValue) {
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
			if k, keyErr = p.keyOf(n, "RateKey", set.RateKey); errors.Is(keyErr, ErrInvalidValue) {
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
	// An attempt's run_at is its place in the queue of ready work: when it became ready, less
	// its priority's head start (graph.Priority). A retry that keeps its place keeps the head
	// start it had; a delayed one is due at its time, and queued from then.
	runAt := p.now.Add(-time.Duration(int(p.exec.Priority)+set.Priority) * graph.PriorityStep)
	if p.requeueAt != nil && delay <= 0 {
		runAt = *p.requeueAt
	}
	if delay > 0 {
		runAt = p.now.Add(delay)
	}
	if keyErr != nil {
		rateKey = nil // it never starts: its node failed
	}
	c := &Attempt{Node: n.Name(), Attempt: attempt, MaxAttempts: set.MaxAttempts, RunAt: runAt,
		AbandonAfterMS: set.AbandonAfter.Milliseconds(), HeartbeatTimeoutMS: set.HeartbeatTimeout.Milliseconds(),
		ComputedWith: sig.String(), ConcurrencyKey: key, MaxParallel: maxParallel,
		CreatedAt: p.now, Traceparent: p.env.Traceparent, RateKey: rateKey}
	if keyErr != nil {
		msg := Storable(keyErr.Error())
		c.State, c.Error, c.FinishedAt = StateFailed, &msg, &p.now
	} else {
		p.makeReady(c)
	}
	p.newAttempt(c)
	if c.State == StateFailed {
		p.warn("the node's concurrency or rate key failed; the node has failed", "node", n.Name(), "error", keyErr)
		p.nodeFailed(c, keyErr)
	}
	return c, nil
}

// keyOf calls fn, node n's ConcurrencyKey or RateKey (option), for the execution's key. A panic, or
// a key that cannot be stored (see checkKey), is the error that fails the node; in a caller's write
// (p.caller), a key that cannot be stored is ErrInvalidValue instead, which fails the write.
func (p *Plan) keyOf(n graph.Node, option string, fn func(graph.Values) string) (string, error) {
	k, err := recovered("the "+option+" of node "+quote(n.Name()), func() string { return fn(p.values) })
	if bad := CheckKey(k); err == nil && bad != nil {
		err = fmt.Errorf("the %s of node %s returned a key that cannot be stored: %w; "+
			"a key is valid UTF-8 with no NUL character, at most %d bytes", option, quote(n.Name()), bad, MaxKeyBytes)
		if p.caller {
			return "", fmt.Errorf("%w: %w", ErrInvalidValue, err)
		}
	}
	return k, err
}

// holdsClaim reports whether c, a claimed attempt, is still its node's current attempt, RUNNING
// under the same claim: the fence of its outcome.
func (p *Plan) holdsClaim(c *Attempt) bool {
	cur := p.latest[c.Node]
	return cur != nil && cur.State == StateRunning && deref(cur.ClaimToken) == deref(c.ClaimToken) &&
		deref(cur.ReplicaID) == deref(c.ReplicaID)
}

// recordOutcome records outcome o, fenced by its claim (ErrClaimLost), and advances the
// execution.
func (p *Plan) recordOutcome(o Outcome) error {
	if !p.holdsClaim(o.Claim) {
		return fmt.Errorf("%w: computation %d of %q in %s", ErrClaimLost, o.Claim.ID, o.Claim.Node, o.Claim.ExecutionID)
	}
	c := p.latest[o.Claim.Node]
	p.revision++
	if p.exec.CanceledAt != nil { // its result is dropped
		p.endCanceled(c, "")
		return nil
	}
	p.promote = p.promote || c.Gated() // its slot is free
	finishedAt := p.now
	c.FinishedAt = &finishedAt
	if o.Err != nil {
		c.State = StateFailed
		msg := Storable(o.Err.Error())
		c.Error = &msg
		p.attemptChanged(c)
		if err := p.afterFailure(c, o.Err, graph.IsPermanent(o.Err)); err != nil {
			return err
		}
		return p.advance() // a Failed gate may hold now
	}
	c.State = StateSuccess
	if o.Used != nil {
		c.ComputedWith = signature(o.Used).String()
	}
	p.attemptChanged(c)
	p.forgetUndueTicks(c)
	n, _ := p.g.Node(c.Node)
	ok, err := holds(n, p.withFailures(p.values))
	switch {
	case err != nil:
		p.gatePanicked(c, err)
	case !ok:
		p.cancelAttempt(c, "canceled: gate no longer holds")
	case n.Kind() == graph.KindMutate:
		if err := p.mutate(n, o.Result); err != nil {
			return err
		}
	default:
		p.setValue(c.Node, o.Result, nil, p.revision)
	}
	return p.advance()
}

// forgetUndueTicks drops from a finished attempt's upstream revisions each tick whose value it
// read before that value came due: a recurring tick's next cycle, written while the attempt ran.
// For the attempt, that cycle has not happened yet; it must run again when it does. Gates and
// signatures see ticks only once they are due, so the attempt's record must too.
func (p *Plan) forgetUndueTicks(c *Attempt) {
	if len(p.dueView()) == len(p.values) {
		return // no tick waits
	}
	sig := parseSignature(c.ComputedWith)
	forgot := false
	for up, rev := range sig {
		if n, ok := p.g.Node(up); ok && isTick(n) && p.values[up].Revision == rev && !p.tickDue(up) {
			delete(sig, up)
			forgot = true
		}
	}
	if forgot {
		c.ComputedWith = sig.String()
		p.attemptChanged(c)
	}
}

// cancelAttempt marks a finished attempt CANCELED, with reason.
func (p *Plan) cancelAttempt(c *Attempt, reason string) {
	reason = Storable(reason)
	c.State, c.Error = StateCanceled, &reason
	p.attemptChanged(c)
}

// failAttempt turns a finished attempt into the node's final failure, with cause: user code
// that the store called for it panicked.
func (p *Plan) failAttempt(c *Attempt, cause error) {
	p.warn("user code panicked; the node has failed", "node", c.Node, "error", cause)
	msg := Storable(cause.Error())
	c.State, c.Error = StateFailed, &msg
	p.attemptChanged(c)
	p.nodeFailed(c, cause)
}

// gatePanicked fails the node of a finished attempt whose gate panicked on the current values.
// The failure is for those values, whichever the attempt read, so that advancing records it once.
func (p *Plan) gatePanicked(c *Attempt, cause error) {
	n, _ := p.g.Node(c.Node)
	c.ComputedWith = signature(Signature(n, p.dueView())).String()
	p.failAttempt(c, cause)
}

// afterFailure follows a failed or abandoned attempt. If the node's gate no longer holds, the
// attempt is CANCELED: nothing retries it and no failure is announced; the node runs again when
// its gate next holds. Otherwise, while attempts remain and the failure is not permanent, the next
// attempt is created with the node's backoff; else the node has failed for good.
func (p *Plan) afterFailure(c *Attempt, cause error, permanent bool) error {
	n, ok := p.g.Node(c.Node)
	if !ok {
		return fmt.Errorf("%w: graph %q has no node %q", ErrUnknownNode, p.g.Name(), c.Node)
	}
	ok, err := holds(n, p.withFailures(p.values))
	switch {
	case err != nil:
		p.gatePanicked(c, err)
		return nil
	case !ok:
		p.cancelAttempt(c, "canceled: gate no longer holds; "+deref(c.Error))
		return nil
	case permanent || c.Attempt >= c.MaxAttempts:
		p.nodeFailed(c, cause)
		return nil
	}
	backoff, err := recovered("the Backoff of node "+quote(c.Node), func() time.Duration { return n.Settings().Backoff(c.Attempt) })
	if err != nil {
		p.failAttempt(c, fmt.Errorf("%s; then %w", deref(c.Error), err))
		return nil
	}
	_, err = p.insertComputation(n, c.Attempt+1, parseSignature(c.ComputedWith), backoff)
	return err
}

// nodeFailed records that c, the newest attempt of its node, ended the node's budget: waiters
// learn it, the failure event is claimed, and OnSave gets the error.
func (p *Plan) nodeFailed(c *Attempt, cause error) {
	p.changed = true
	p.claimEvent(EventFailed)
	n, _ := p.g.Node(c.Node)
	if n.Settings().OnSave != nil || p.g.OnSave() != nil {
		p.saved = append(p.saved, graph.SaveEvent{
			ExecutionID: p.exec.ID, Graph: p.g.Name(), Node: c.Node,
			Err: fmt.Errorf("node %q %s: %w", c.Node, Failure(c.State, c.Attempt, c.MaxAttempts, deref(c.Error)), cause),
		})
	}
}

// mutate writes a mutate node's result into its targets. By default a target keeps its revision,
// so nothing downstream recomputes; with UpdateRevisionOnChange, a target whose value changed gets
// the completion's revision. The node's own value records what it wrote.
func (p *Plan) mutate(n graph.Node, result json.RawMessage) error {
	targets := n.Targets()
	for _, target := range targets {
		rev := p.revision
		if old, ok := p.values[target]; ok && !n.Settings().UpdateRevisionOnChange {
			rev = old.Revision
		}
		p.setValue(target, result, nil, rev)
	}
	own, err := json.Marshal(map[string]any{"mutated": targets, "value": result})
	if err != nil {
		return fmt.Errorf("recording mutate %q: %w", n.Name(), err)
	}
	p.setValue(n.Name(), own, nil, p.revision)
	return nil
}

// abandon records that the current attempt c of its node was abandoned, for reason, and retries
// it or fails its node.
func (p *Plan) abandon(c *Attempt, reason string) error {
	p.revision++
	if p.exec.CanceledAt != nil {
		p.endCanceled(c, reason)
		return nil
	}
	// Its slot is free: promoted now if the promotion lock is free, or else by the pass's
	// promotion after its abandonments, not after each of them, so that the lock cannot hold up
	// the retries of the work of a dead replica.
	p.promote, p.promoteByCaller = c.Gated(), true
	finishedAt := p.now
	msg := Storable(reason)
	c.State, c.Error, c.FinishedAt = StateAbandoned, &msg, &finishedAt
	p.attemptChanged(c)
	// Its retry, if it has no backoff, keeps its place in the queue: the work has been due since
	// its run_at, and it waited its turn once already. Behind a backlog, a retry at the back of
	// the queue would wait for all of it a second time, after a replica's death.
	p.requeueAt = &c.RunAt
	err := p.afterFailure(c, fmt.Errorf("%s: %w", reason, errAbandoned), false)
	p.requeueAt = nil
	if err != nil {
		return err
	}
	return p.advance() // a Failed gate may hold now
}

// archive archives or unarchives the execution p. Archiving cancels its PENDING and AVAILABLE
// attempts, so that no gating slot stays held by work that will never be claimed; its RUNNING
// attempts finish, or are abandoned, as usual. Unarchiving revives what archiving canceled, and
// advances the execution for what changed meanwhile.
func (p *Plan) archive(archived bool) error {
	if (p.exec.ArchivedAt != nil) == archived {
		return nil
	}
	p.revision++
	p.changed = true
	p.setArchived(archived)
	if archived {
		return nil
	}
	return p.advance()
}

// setArchived archives or unarchives the execution, and cancels or revives its waiting attempts.
// Archiving asks the children to follow (Cascade).
func (p *Plan) setArchived(archived bool) {
	p.exec.ArchivedAt = nil
	if archived {
		p.exec.ArchivedAt = &p.now
		p.cascade.Archive = true
	}
	p.cold = true
	for _, name := range slices.Sorted(maps.Keys(p.latest)) {
		c := p.latest[name]
		switch {
		case archived && ArchivedWaiting.Holds(&p.exec, c, p.now):
			p.cancelWaiting(c)
		case !archived && p.exec.CanceledAt == nil && c.State == StateCanceled && c.Error != nil && *c.Error == ReasonArchived:
			// Unarchive revives what archiving canceled; in a canceled execution, nothing.
			c.Error, c.FinishedAt = nil, nil
			p.makeReady(c)
			p.attemptChanged(c)
		}
	}
}

// makeReady makes c, a waiting attempt, ready as the table says (Ready): AVAILABLE, or PENDING
// for its time, its gating or its rate limit, or PAUSED while the execution or its graph version
// is, or CANCELED in a canceled or archived execution. The caller records the change.
func (p *Plan) makeReady(c *Attempt) {
	c.State = Ready(&p.exec, c, p.now, p.env.Held)
	switch c.State {
	case StateAvailable:
		c.AvailableAt = &p.now
		p.work = true
	case StatePending:
		p.promote = p.promote || c.Waits() && !c.RunAt.After(p.now)
	case StateCanceled:
		c.Error, c.FinishedAt = readyError(&p.exec, c.State), &p.now
	}
}

// cancelWaiting cancels c, a waiting attempt of an archived execution, which frees the slot an
// AVAILABLE one held.
func (p *Plan) cancelWaiting(c *Attempt) {
	p.promote = p.promote || c.Gated() && c.State == StateAvailable
	reason := ReasonArchived
	c.State, c.Error, c.FinishedAt = StateCanceled, &reason, &p.now
	p.attemptChanged(c)
}

// pause pauses or resumes the execution, unless it is so already, or canceled. Pausing makes its
// waiting attempts PAUSED, which no claim or promotion reads (an AVAILABLE gated one frees its
// slot); the attempts made while it is paused are PAUSED too, ticks that come due included; its
// running attempts run on. Resuming makes them ready again, each keeping its run_at, and so its
// place in the queue, and advances the execution. Its children follow (Cascade).
func (p *Plan) pause(paused bool) error {
	if (p.exec.PausedAt != nil) == paused || p.exec.CanceledAt != nil {
		return nil
	}
	p.revision++
	p.changed, p.cold = true, true
	p.exec.PausedAt = nil
	p.cascade.Pause, p.cascade.Resume = paused, !paused
	if paused {
		p.exec.PausedAt = &p.now
	}
	for _, name := range slices.Sorted(maps.Keys(p.latest)) {
		switch c := p.latest[name]; {
		case paused && GraphPausing.Holds(&p.exec, c, p.now):
			p.holdAttempt(c)
		case !paused && c.State == StatePaused:
			p.makeReady(c)
			p.attemptChanged(c)
		}
	}
	if paused {
		return nil
	}
	return p.advance()
}

// endCanceled ends c, an attempt of a canceled execution, CANCELED with the cancel's reason (and
// then why, if not ""): a waiting one, or a running one whose outcome or abandonment has come. The
// slot it held is free.
func (p *Plan) endCanceled(c *Attempt, why string) {
	p.promote = p.promote || c.Gated()
	msg := "canceled: " + deref(p.exec.CancelReason)
	if why != "" {
		msg += "; " + why
	}
	msg = Storable(msg)
	c.State, c.Error, c.FinishedAt = StateCanceled, &msg, &p.now
	p.attemptChanged(c)
}

// holdAttempt makes c, a waiting attempt, PAUSED, which frees the slot an AVAILABLE one held.
func (p *Plan) holdAttempt(c *Attempt) {
	p.promote = p.promote || c.Gated() && c.State == StateAvailable
	c.State = StatePaused
	p.attemptChanged(c)
}

// cancel cancels the execution for reason: its waiting attempts end CANCELED, which frees their
// slots; its running ones run on, their functions told to stop, and end CANCELED with their
// outcome, which is dropped, or their abandonment: a concurrency key or a parallel limit never has
// two holders while a function still runs. Nothing new is made (advance), and the canceled event
// is claimed; its children follow (Cascade). A canceled execution stays as it is.
func (p *Plan) cancel(reason string) {
	if p.exec.CanceledAt != nil {
		return
	}
	reason = Storable(reason)
	p.revision++
	p.changed, p.cold = true, true
	p.exec.CanceledAt, p.exec.CancelReason = &p.now, &reason
	for _, name := range slices.Sorted(maps.Keys(p.latest)) {
		if c := p.latest[name]; c.Active() && c.State != StateRunning {
			p.endCanceled(c, "")
		}
	}
	p.claimEvent(EventCanceled)
	p.canceled = true
	p.cascade.Cancel, p.cascade.Reason = true, reason
}

// retry gives node of the execution st, which has failed for good, a new first attempt, and
// re-arms the failure notification.
func (p *Plan) retry(node string) error {
	n, ok := p.g.Node(node)
	if !ok {
		return fmt.Errorf("%w: graph %q has no node %q", ErrUnknownNode, p.g.Name(), node)
	}
	if p.exec.CanceledAt != nil {
		return fmt.Errorf("%w: execution %s is canceled; nothing of it runs again", ErrCanceled, p.exec.ID)
	}
	latest := p.latest[node]
	if latest == nil || !latest.FailedForGood() {
		return fmt.Errorf("%w: node %q of %s; only a node that failed for good can be retried", ErrNotFailed, node, p.exec.ID)
	}
	p.revision++
	if _, err := p.insertComputation(n, 1, signature(Signature(n, p.dueView())), 0); err != nil {
		return err
	}
	p.changed = true
	// A new failure phase: a later failure is notified again.
	p.exec.FailurePhase++
	p.cold = true
	return p.advance() // a Failed gate on the node no longer holds
}

// tickDue reports whether a tick node has a value whose time has come.
func (p *Plan) tickDue(name string) bool {
	t, ok := tickTime(p.values[name])
	return ok && !t.After(p.now)
}

// dueView is the values as gates see them to decide whether a node may run: a tick is provided
// only once it is due. It is the values themselves when no tick waits, as in most writes (a gate
// does not change them).
func (p *Plan) dueView() graph.Values {
	var due graph.Values
	for name := range p.values {
		if n, _ := p.g.Node(name); isTick(n) && !p.tickDue(name) {
			if due == nil {
				due = maps.Clone(p.values)
			}
			delete(due, name)
		}
	}
	if due == nil {
		return p.values
	}
	return due
}

// withFailures returns vals as gates and functions see them: each node that has failed for good
// is marked Failed, with its error (see graph.Value.Failed). It is vals itself when none has.
func (p *Plan) withFailures(vals graph.Values) graph.Values {
	var out graph.Values
	for name, c := range p.latest {
		if !c.FailedForGood() {
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
func (p *Plan) nextWake() *time.Time {
	var next *time.Time
	for name, v := range p.values {
		if n, _ := p.g.Node(name); !isTick(n) {
			continue
		}
		if t, ok := tickTime(v); ok && t.After(p.now) && (next == nil || t.Before(*next)) {
			next = &t
		}
	}
	return next
}

// recordHistory adds an entry to a historian, whose gate holds, for each tracked node whose
// revision went up, newest first, keeping at most MaxEntries. It reports whether the historian
// changed.
func (p *Plan) recordHistory(n graph.Node) (bool, error) {
	var entries []HistoryEntry
	seen := historianSeen{Seen: map[string]int64{}}
	if v, ok := p.values[n.Name()]; ok {
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
		v, ok := p.values[up]
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
	p.revision++
	return p.setValue(n.Name(), raw, meta, p.revision), nil
}

// archiveByNode archives the execution, as an archive node whose gate holds does. The node's
// value is the time of archiving, in Unix milliseconds.
func (p *Plan) archiveByNode(name string) {
	p.revision++
	p.setValue(name, json.RawMessage(strconv.FormatInt(p.now.UnixMilli(), 10)), nil, p.revision)
	p.setArchived(true)
}

// failedNodes are the nodes whose latest attempt ended their budget, by name.
func (p *Plan) failedNodes() []FailedNode {
	out := []FailedNode{}
	for _, c := range p.latest {
		if c.FailedForGood() {
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
func (p *Plan) claimEvent(event string) {
	e := EventClaim{Event: event}
	if event == EventFailed {
		e.Phase = p.exec.FailurePhase
		b, _ := json.Marshal(p.failedNodes()) // strings and ints always encode
		e.FailedNodes = string(b)
	}
	for _, prior := range p.events {
		if prior.Event == e.Event && prior.Phase == e.Phase {
			return // the first claim of the write holds, as the first of the phase does
		}
	}
	p.events = append(p.events, e)
}

// claimCompletion claims the completed event once the graph's CompletesWhen gate holds and
// nothing is pending or running.
func (p *Plan) claimCompletion() {
	if p.g.CompletesWhen() == nil || p.exec.CanceledAt != nil {
		return
	}
	for _, c := range p.latest {
		if c.Active() {
			return
		}
	}
	if p.completes() {
		p.claimEvent(EventCompleted)
	}
}

// StartsIdle reports whether advancing a new execution of g with no values does nothing: no gate
// holds on no values, nor does the graph's completion, and none panics. New asks it once of each
// graph: a gate is a function of the values alone.
func StartsIdle(g *graph.Graph) bool {
	none := graph.Values{}
	if c := g.CompletesWhen(); c != nil {
		if ok, err := recovered("the completion gate", func() bool { return c.Holds(none) }); ok || err != nil {
			return false
		}
	}
	for _, name := range g.Order() {
		n, _ := g.Node(name)
		if n.Kind() == graph.KindInput {
			continue
		}
		if ok, err := holds(n, none); ok || err != nil {
			return false
		}
	}
	return true
}
