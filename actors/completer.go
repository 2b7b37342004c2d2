package actors

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/journey-go/journey/internal/telemetry"
	"github.com/journey-go/journey/persistence"
)

// maxCompleterBatch caps the outcomes one transaction of the completer records. A batch's fixed
// costs (its round trips, the plans, pgx's buffers, grown anew for each batch) are spread over
// more outcomes with 500 than 200: a drain of 60,000 with 2,000 workers, five alternated runs
// each on a noisy machine, averaged 13,680 computations/s (12,227 to 15,352) against 11,582
// (8,357 to 14,399), and 78 µs of Go CPU a computation against 84.
const maxCompleterBatch = 500

// outcome asks the completer to record one attempt's outcome. The completer answers by calling
// done, once, on its own goroutine: no goroutine waits for the answer.
type outcome struct {
	out persistence.Outcome
	// ctx is for a write alone, once the completer has stopped: the attempt's, whose cancellation
	// the write ignores; each try is bounded by writeTimeout.
	ctx      context.Context
	done     func(error)
	answered atomic.Bool
}

// alone records o in a transaction of its own, within writeTimeout, and answers it.
func (o *outcome) alone(store *persistence.Store) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(o.ctx), writeTimeout)
	defer cancel()
	o.answer(store.RecordAlone(ctx, o.out))
}

// answer calls o.done with err, unless o has been answered.
func (o *outcome) answer(err error) {
	if o.answered.CompareAndSwap(false, true) {
		o.done(err)
	}
}

// inflight are the outcomes handed to a completer and not answered yet. Those that a stopping
// completer leaves in its mailbox, which protoactor drops, are recorded all the same, each alone.
type inflight struct {
	mu      sync.Mutex
	stopped bool
	m       map[*outcome]struct{}
}

// add holds o until its answer, and reports false, holding nothing, once the completer has
// stopped.
func (f *inflight) add(o *outcome) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	if f.m == nil {
		f.m = map[*outcome]struct{}{}
	}
	f.m[o] = struct{}{}
	return true
}

// answer answers o with err and lets it go.
func (f *inflight) answer(o *outcome, err error) {
	f.mu.Lock()
	delete(f.m, o)
	f.mu.Unlock()
	o.answer(err)
}

// stop refuses outcomes from now on, and returns those not answered.
func (f *inflight) stop() []*outcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	left := make([]*outcome, 0, len(f.m))
	for o := range f.m {
		left = append(left, o)
	}
	f.m = nil
	return left
}

type flushOutcomes struct{}

// completer records the outcomes of a replica's computations, many in one transaction: the
// statements of a transaction are set-based, so a batch of a hundred costs little more than one.
// Like the heartbeat batcher, it flushes behind the outcomes already in its mailbox: a lone outcome
// is recorded at once, and those that arrive while a transaction runs make up the next batch. It
// never waits on a timer.
type completer struct {
	store  *persistence.Store
	tel    *telemetry.Telemetry
	logger *slog.Logger
	flight *inflight
	batch  []*outcome
}

func completerProps(store *persistence.Store, tel *telemetry.Telemetry, logger *slog.Logger, flight *inflight) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &completer{store: store, tel: tel, logger: logger.With("service", "completer"), flight: flight}
	}, actor.WithSupervisor(stopStrategy))
}

// Receive implements actor.Actor.
func (c *completer) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *outcome:
		if len(c.batch) == 0 {
			ctx.Send(ctx.Self(), flushOutcomes{})
		}
		c.batch = append(c.batch, msg)
		if len(c.batch) >= maxCompleterBatch {
			c.flush()
		}
	case flushOutcomes:
		if len(c.batch) > 0 {
			c.flush()
		}
	case *actor.Stopped:
		for _, o := range c.flight.stop() { // left in the mailbox
			go o.alone(c.store)
		}
	}
}

// flush records the batch. If its transaction fails, each outcome is recorded alone, so that one
// outcome the database refuses does not fail the others; one that it refuses even alone is
// recorded as the attempt's failure, with the reason (see persistence.Store.RecordAlone). Once an
// execution's row is found held past the lock timeout, the other outcomes of that execution get
// the same error at once, for their computations to retry, so that the others are not held back.
func (c *completer) flush() {
	batch := c.batch
	c.batch = nil
	outs := make([]persistence.Outcome, len(batch))
	for i, o := range batch {
		outs[i] = o.out
	}
	wctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	c.tel.Batch(wctx, len(outs))
	lost, err := c.store.Record(wctx, outs)
	if err != nil && (len(batch) > 1 || persistence.Refused(err)) {
		c.logger.Warn("recording a batch of outcomes failed; recording each alone", "count", len(batch), "error", err)
		held := map[string]error{}
		for _, o := range batch {
			if err, ok := held[o.out.C.ExecutionID]; ok {
				c.flight.answer(o, err)
				continue
			}
			err := c.store.RecordAlone(wctx, o.out)
			if errors.Is(err, persistence.ErrLockTimeout) {
				held[o.out.C.ExecutionID] = err
			}
			c.flight.answer(o, err)
		}
		return
	}
	for i, o := range batch {
		if err != nil {
			c.flight.answer(o, err)
		} else {
			c.flight.answer(o, lost[i])
		}
	}
}

// hand hands o to the completer, or, once the completer has stopped, records it alone on a
// goroutine of its own.
func (env *computationEnv) hand(o *outcome) {
	if env.flight.add(o) {
		env.system.Root.Send(env.completer, o)
		return
	}
	go o.alone(env.store)
}
