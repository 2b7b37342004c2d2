package actors

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/journey-go/journey/persistence"
)

// beatRequest asks the heartbeat batcher to extend one claim's heartbeat deadline.
type beatRequest struct {
	ref     persistence.ClaimRef
	replyTo *actor.PID
}

// beatResult answers a beatRequest.
type beatResult struct {
	beat persistence.Beat
	err  error
}

type flushBeats struct{}

// heartbeats batches the watchdogs' heartbeats of one replica into one UPDATE: many computations
// running at once cost one statement per flush, not one each, while each watchdog still decides
// for its own computation. A flush is queued behind the requests already in the mailbox, so a
// batch holds everything that arrived while the previous statement ran, and adds no delay.
type heartbeats struct {
	store     *persistence.Store
	replicaID string
	timeout   time.Duration
	logger    *slog.Logger
	batch     []beatRequest
}

func heartbeatsProps(store *persistence.Store, replicaID string, logger *slog.Logger) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &heartbeats{store: store, replicaID: replicaID, timeout: 5 * time.Second,
			logger: logger.With("service", "heartbeats")}
	})
}

// Receive implements actor.Actor.
func (h *heartbeats) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case beatRequest:
		if len(h.batch) == 0 {
			ctx.Send(ctx.Self(), flushBeats{})
		}
		h.batch = append(h.batch, msg)
	case flushBeats:
		h.flush(ctx)
	}
}

func (h *heartbeats) flush(ctx actor.Context) {
	batch := h.batch
	h.batch = nil
	refs := make([]persistence.ClaimRef, len(batch))
	for i, r := range batch {
		refs[i] = r.ref
	}
	dbctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	beats, err := h.store.Heartbeat(dbctx, h.replicaID, refs)
	cancel()
	if err == nil {
		h.logger.Debug("heartbeats extended", "count", len(refs))
	}
	for _, r := range batch {
		ctx.Send(r.replyTo, beatResult{beat: beats[r.ref.ID], err: err})
	}
}
