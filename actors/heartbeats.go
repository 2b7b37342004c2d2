package actors

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/journey-go/journey/persistence"
)

// heartbeatStatementTimeout bounds one heartbeat statement.
const heartbeatStatementTimeout = 5 * time.Second

// registerClaim asks the replica's heartbeats to keep a claim alive, until unregisterClaim.
type registerClaim struct {
	c                 *persistence.Computation
	interval, timeout time.Duration
	watchdog          *actor.PID // told claimLost when the claim is lost or can no longer be kept
}

// unregisterClaim ends the heartbeats of a claim.
type unregisterClaim struct{ id int64 }

// claimReturned tells the heartbeats that the function of a claim has returned: its outcome waits
// to be recorded, and its heartbeats keep its deadline too (persistence.ClaimRef.Returned).
type claimReturned struct{ id int64 }

// beatTick is the heartbeats' timer message; gen tells the current timer from replaced ones.
type beatTick struct{ gen int }

// beatingClaim is a registered claim.
type beatingClaim struct {
	registerClaim
	due      time.Time // when its heartbeat is to be extended next
	lastOK   time.Time // when it was last known alive
	failures int       // heartbeats failed in a row
	returned bool      // its function has returned (claimReturned)
}

// heartbeats extends the heartbeat deadlines of every claim running on one replica in one
// UPDATE per tick, so that a replica sends about one heartbeat statement per heartbeat interval
// however many computations it runs. Each computation's watchdog registers its claim when it
// starts and unregisters it when it stops. A tick comes when the first registered claim is due,
// and extends every claim that falls due within the shortest interval registered, so that claims
// registered at different times share statements; but not one extended, or registered, less than
// a quarter of its interval ago, so that short computations are not extended at all, and ticks
// come at least ¾ of an interval apart. A claim whose heartbeat fails, or whose row is locked, is
// retried sooner; when its heartbeat deadline can no longer be met, or the claim is lost, its
// watchdog is told.
type heartbeats struct {
	store     *persistence.Store
	replicaID string
	logger    *slog.Logger
	hooks     Hooks
	claims    map[int64]*beatingClaim
	timers    *scheduler.TimerScheduler
	cancel    scheduler.CancelFunc // of the scheduled tick, if any
	tickAt    time.Time            // when the scheduled tick comes; zero when none is
	gen       int
}

func heartbeatsProps(store *persistence.Store, replicaID string, logger *slog.Logger, hooks Hooks) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &heartbeats{store: store, replicaID: replicaID, logger: logger.With("service", "heartbeats"),
			hooks: hooks, claims: map[int64]*beatingClaim{}}
	})
}

// Receive implements actor.Actor.
func (h *heartbeats) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		h.timers = scheduler.NewTimerScheduler(ctx)
	case registerClaim:
		now := time.Now()
		b := &beatingClaim{registerClaim: msg, due: now.Add(msg.interval), lastOK: now}
		h.claims[msg.c.ID] = b
		h.scheduleBy(ctx, b.due)
	case unregisterClaim:
		delete(h.claims, msg.id)
	case claimReturned:
		if b := h.claims[msg.id]; b != nil {
			b.returned = true
		}
	case beatTick:
		if msg.gen != h.gen {
			return // a replaced timer's
		}
		h.tickAt = time.Time{}
		h.tick(ctx)
		h.scheduleNext(ctx)
	case *actor.Stopping, *actor.Restarting:
		// protoactor timers are not tied to the actor's life.
		if h.cancel != nil {
			h.cancel()
		}
	}
}

// scheduleBy makes sure a tick comes by at.
func (h *heartbeats) scheduleBy(ctx actor.Context, at time.Time) {
	if !h.tickAt.IsZero() && !at.Before(h.tickAt) {
		return
	}
	if h.cancel != nil {
		h.cancel()
	}
	h.gen++
	h.tickAt = at
	h.cancel = h.timers.SendOnce(max(time.Until(at), 0), ctx.Self(), beatTick{gen: h.gen})
}

// scheduleNext schedules a tick for the first claim due, if any is registered.
func (h *heartbeats) scheduleNext(ctx actor.Context) {
	var first time.Time
	for _, b := range h.claims {
		if first.IsZero() || b.due.Before(first) {
			first = b.due
		}
	}
	if !first.IsZero() {
		h.scheduleBy(ctx, first)
	}
}

// tick extends, in one statement, the heartbeat of every claim due soon enough, and handles the
// outcome of each.
func (h *heartbeats) tick(ctx actor.Context) {
	now := time.Now()
	var shortest time.Duration
	for _, b := range h.claims {
		if shortest == 0 || b.interval < shortest {
			shortest = b.interval
		}
	}
	var batch []*beatingClaim
	for _, b := range h.claims {
		if b.due.After(now.Add(min(shortest, b.interval*3/4))) {
			continue
		}
		if s := h.hooks.SuppressHeartbeat; s != nil && s(b.c) {
			b.due = now.Add(b.interval)
			continue
		}
		batch = append(batch, b)
	}
	if len(batch) == 0 {
		return
	}
	refs := make([]persistence.ClaimRef, len(batch))
	for i, b := range batch {
		refs[i] = b.c.Ref()
		refs[i].Returned = b.returned
	}
	if hook := h.hooks.Heartbeating; hook != nil {
		hook(refs)
	}
	dbctx, cancel := context.WithTimeout(context.Background(), heartbeatStatementTimeout)
	beats, err := h.store.Heartbeat(dbctx, h.replicaID, refs)
	cancel()
	done := time.Now()
	if err != nil {
		h.logger.Warn("heartbeats failed; retrying", "error", err, "count", len(batch))
	} else {
		h.logger.Debug("heartbeats extended", "count", len(batch))
	}
	for _, b := range batch {
		switch beat := beats[b.c.ID]; {
		case err != nil || beat == persistence.BeatBusy:
			// Not known to be alive: try again soon, while the heartbeat deadline can still be met.
			b.failures++
			retry := min(b.interval/4<<b.failures, b.interval)
			cause := err
			if cause == nil {
				cause = fmt.Errorf("its row was locked")
			}
			if done.Sub(b.lastOK)+retry >= b.timeout {
				h.lose(ctx, b, fmt.Sprintf("heartbeat deadline can no longer be met: %v", cause))
				continue
			}
			b.due = done.Add(retry)
		case beat == persistence.BeatLost:
			h.lose(ctx, b, "claim lost: the computation was abandoned or reclaimed")
		case beat == persistence.BeatFinished:
			// Its watchdog unregisters it as the computation stops.
			delete(h.claims, b.c.ID)
		case beat == persistence.BeatCanceled:
			// Extended, and its execution canceled: a replica that missed the cancel's NOTIFY.
			b.lastOK, b.failures, b.due = now, 0, now.Add(b.interval)
			ctx.Send(b.watchdog, executionCanceled{})
		default:
			// Extended as of the statement's start, at the latest.
			b.lastOK, b.failures, b.due = now, 0, now.Add(b.interval)
		}
	}
}

// lose tells a claim's watchdog that the claim is lost, and forgets it.
func (h *heartbeats) lose(ctx actor.Context, b *beatingClaim, reason string) {
	delete(h.claims, b.c.ID)
	ctx.Send(b.watchdog, claimLost{reason: reason})
}
