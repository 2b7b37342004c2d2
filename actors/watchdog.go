package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/journey-go/journey/persistence"
)

// watchdog keeps one computation's claim alive. It is the computation's child: it registers the
// claim with the replica's heartbeats while it lives, and tells the computation when the claim is
// lost or can no longer be kept.
type watchdog struct {
	env      *computationEnv
	c        *persistence.Computation
	interval time.Duration
	timeout  time.Duration
}

func watchdogProps(env *computationEnv, c *persistence.Computation, interval, timeout time.Duration) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &watchdog{env: env, c: c, interval: interval, timeout: timeout}
	}, env.props(true)...)
}

// Receive implements actor.Actor.
func (w *watchdog) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		ctx.Send(w.env.heartbeats, registerClaim{c: w.c, interval: w.interval, timeout: w.timeout, watchdog: ctx.Self()})
	case claimLost, executionCanceled:
		ctx.Send(ctx.Parent(), msg)
	case *actor.Stopping:
		ctx.Send(w.env.heartbeats, unregisterClaim{id: w.c.ID})
	}
}
