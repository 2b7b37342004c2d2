package actors

import (
	"context"
	"errors"
	"log/slog"
	"time"

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

// outcome asks the completer to record one attempt's outcome. The completer answers on reply,
// which has room for the answer.
type outcome struct {
	out   persistence.Outcome
	reply chan error
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
	done   chan struct{} // closed once the completer has stopped
	batch  []outcome
}

func completerProps(store *persistence.Store, tel *telemetry.Telemetry, logger *slog.Logger, done chan struct{}) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &completer{store: store, tel: tel, logger: logger.With("service", "completer"), done: done}
	}, actor.WithSupervisor(stopStrategy))
}

// Receive implements actor.Actor.
func (c *completer) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case outcome:
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
		close(c.done) // the computations waiting on the batch left behind record it themselves
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
				o.reply <- err
				continue
			}
			err := c.store.RecordAlone(wctx, o.out)
			if errors.Is(err, persistence.ErrLockTimeout) {
				held[o.out.C.ExecutionID] = err
			}
			o.reply <- err
		}
		return
	}
	for i, o := range batch {
		if err != nil {
			o.reply <- err
		} else {
			o.reply <- lost[i]
		}
	}
}

// recordOutcome hands o to the completer and waits for its answer, or records o itself, by
// deadline, once the completer has stopped. The completer answers every outcome it takes: its
// transactions end within writeTimeout.
func (env *computationEnv) recordOutcome(ctx context.Context, deadline time.Time, o persistence.Outcome) error {
	reply := make(chan error, 1)
	select {
	case <-env.completerDone:
		return env.recordAlone(ctx, deadline, o)
	default:
		env.system.Root.Send(env.completer, outcome{out: o, reply: reply})
	}
	select {
	case err := <-reply:
		return err
	case <-env.completerDone:
		select {
		case err := <-reply: // answered as it stopped
			return err
		default:
			return env.recordAlone(ctx, deadline, o)
		}
	}
}

// recordAlone records o in a transaction of its own, by deadline.
func (env *computationEnv) recordAlone(ctx context.Context, deadline time.Time, o persistence.Outcome) error {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return env.store.RecordAlone(ctx, o)
}
