package journey

import (
	"context"
	"sync"
	"time"

	"github.com/journey-go/journey/actors"
	"github.com/journey-go/journey/internal/clock"
	"github.com/journey-go/journey/scheduler"
	"github.com/journey-go/journey/sweeper"
)

// moveTimeout bounds what the runtime does when a test moves its clock.
const moveTimeout = 30 * time.Second

// clockKey is the context key under which the runtime's clock travels in the context of every
// function it runs.
type clockKey struct{}

// Now returns the current time by the runtime's clock. A compute or tick function should take the
// time from Now(ctx), with the ctx it was given, rather than from time.Now: in production the two
// agree, and in a test (see package journeytest) Now follows the test's clock, which the test moves
// at will. A tick that returns Now(ctx).Add(time.Hour) comes due when the test moves the clock by
// an hour. With a context that does not come from the runtime, Now returns time.Now().
func Now(ctx context.Context) time.Time {
	if c, ok := ctx.Value(clockKey{}).(clock.Clock); ok {
		return c.Now()
	}
	return time.Now()
}

// clockMoves follows the moves of a test clock (Config.Test.Clock, when it is a clock.Mover).
type clockMoves struct {
	mu      sync.Mutex // held while the runtime acts on a move, so that Stop waits for it
	stopped bool       // no move is acted on any more
	remove  func()     // unregisters from the clock; nil when not registered
}

// observeClock registers the runtime with a test clock that moves, so that each move does at once
// what it made due. A real clock does not move, and nothing is registered.
func (r *Runtime) observeClock() {
	if c, ok := r.cfg.Test.Clock.(clock.Mover); ok {
		r.moves.remove = c.OnMove(r.timeMoved)
	}
}

// stopObservingClock unregisters from the test clock and waits for a move being acted on, so
// that no move reaches the actors once Stop stops them.
func (r *Runtime) stopObservingClock() {
	if r.moves.remove != nil {
		r.moves.remove()
	}
	r.moves.mu.Lock()
	defer r.moves.mu.Unlock()
	r.moves.stopped = true
}

// timeMoved acts on a move of the test clock at once, instead of at the next intervals. It writes
// the replica's heartbeat at the new time, so that a jump does not make the replica look dead;
// runs a sweep pass, which abandons the attempts past their deadlines, promotes the retries whose
// backoff has passed and advances the executions whose ticks came due; fires the schedules that
// came due; then wakes the dispatcher and the delivery of notifications. It returns once the pass is over.
//
// A jump is a jump: a computation running across it gets no heartbeat during it, so a jump past its
// heartbeat timeout abandons it, as it would after a freeze that long.
func (r *Runtime) timeMoved() {
	r.moves.mu.Lock()
	defer r.moves.mu.Unlock()
	if r.moves.stopped || r.isHalted() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), moveTimeout)
	defer cancel()
	if _, err := r.store.ReplicaHeartbeat(ctx, r.cfg.ReplicaID, r.identity, r.cfg.ReplicaStaleAfter, false); err != nil {
		r.logger.Warn("writing the replica heartbeat after the clock moved failed", "error", err)
	}
	done := make(chan struct{})
	root := r.system.Root
	root.Send(r.sweeper, sweeper.Pass{Done: done})
	select {
	case <-done:
	case <-ctx.Done():
		r.logger.Warn("the sweep pass after the clock moved did not end in time", "timeout", moveTimeout)
	}
	if r.scheduler != nil {
		done := make(chan struct{})
		root.Send(r.scheduler, scheduler.Pass{Done: done})
		select {
		case <-done:
		case <-ctx.Done():
			r.logger.Warn("the schedules' pass after the clock moved did not end in time", "timeout", moveTimeout)
		}
	}
	root.Send(r.dispatcher, actors.Wake{})
	root.Send(r.delivery, actors.Wake{})
}
