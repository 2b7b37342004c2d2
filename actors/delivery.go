package actors

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/journey-go/journey/internal/telemetry"
	"github.com/journey-go/journey/persistence"
)

// maxDeliveriesPerRound bounds one round of deliveries, so that the actor reads its mailbox (a
// stop, say) between rounds.
const maxDeliveriesPerRound = 100

// DeliveryConfig configures the notification delivery actor of one replica.
type DeliveryConfig struct {
	Store  *persistence.Store
	Policy persistence.DeliveryPolicy
	// Send delivers one notice to its target, within Policy.SendTimeout; an error means it will be
	// retried.
	Send func(ctx context.Context, n *persistence.Notice) error
	// PollInterval is the fallback for missed notifications.
	PollInterval time.Duration
	Logger       *slog.Logger
	// Telemetry counts the deliveries. Default: none.
	Telemetry *telemetry.Telemetry
	// Halted, if set, reports whether the replica has halted: it delivers nothing more.
	Halted func() bool
}

type deliveryTick struct{}

// delivery sends the notifications in the outbox. NOTIFY wakes it when a claim is written, and a
// poll catches retries that come due and anything a notification missed.
type delivery struct {
	cfg    DeliveryConfig
	logger *slog.Logger
	timers *scheduler.TimerScheduler
	cancel scheduler.CancelFunc
	queued bool // a round is queued
}

// deliverNow runs a round of deliveries; wakes are folded into one queued round.
type deliverNow struct{}

// NewDelivery returns the props of the delivery actor.
func NewDelivery(cfg DeliveryConfig) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &delivery{cfg: cfg, logger: cfg.Logger.With("service", "delivery")}
	})
}

// Receive implements actor.Actor.
func (d *delivery) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		d.timers = scheduler.NewTimerScheduler(ctx)
		d.cancel = d.timers.SendOnce(d.cfg.PollInterval, ctx.Self(), deliveryTick{})
	case Wake:
		if !d.queued {
			d.queued = true
			ctx.Send(ctx.Self(), deliverNow{})
		}
	case deliverNow:
		d.queued = false
		d.runOnce()
	case deliveryTick:
		d.runOnce()
		d.cancel = d.timers.SendOnce(d.cfg.PollInterval, ctx.Self(), deliveryTick{})
	case *actor.Stopping:
		d.cancel()
	}
}

// runOnce delivers what is due, up to a bound.
func (d *delivery) runOnce() {
	if d.cfg.Halted != nil && d.cfg.Halted() {
		return
	}
	for range maxDeliveriesPerRound {
		ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Policy.SendTimeout+persistence.DeliverySlack)
		var sent *persistence.Notice
		state, err := d.cfg.Store.DeliverOne(ctx, d.cfg.Policy, func(_ context.Context, n *persistence.Notice) error {
			sent = n
			sctx, scancel := context.WithTimeout(ctx, d.cfg.Policy.SendTimeout)
			defer scancel()
			return d.cfg.Send(sctx, n)
		})
		cancel()
		if err != nil {
			d.logger.Warn("delivering notifications failed", "error", err)
			return
		}
		if state == "" {
			return
		}
		d.count(sent, state)
	}
}

// count records a delivery attempt of n that left it in state.
func (d *delivery) count(n *persistence.Notice, state string) {
	target := "webhook"
	if n.Target == persistence.TargetHandler {
		target = persistence.TargetHandler
	}
	outcome := map[string]string{persistence.DeliveryDelivered: telemetry.DeliveryDelivered,
		persistence.DeliveryPending: telemetry.DeliveryFailed, persistence.DeliveryDead: telemetry.DeliveryDead}[state]
	telemetry.Or(d.cfg.Telemetry).Delivered(context.Background(), n.Event, target, outcome)
}
