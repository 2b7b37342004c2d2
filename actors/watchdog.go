package actors

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/journey-go/journey/persistence"
)

// beat is the watchdog's timer message.
type beat struct{}

// watchdog extends one computation's heartbeat deadline. It is the computation's child.
type watchdog struct {
	env        *computationEnv
	c          *persistence.Computation
	interval   time.Duration
	timeout    time.Duration
	logger     *slog.Logger
	timers     *scheduler.TimerScheduler
	cancelNext scheduler.CancelFunc
	lastOK     time.Time
	failures   int
}

func watchdogProps(env *computationEnv, c *persistence.Computation, interval, timeout time.Duration) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &watchdog{
			env: env, c: c, interval: interval, timeout: timeout,
			logger: env.logger.With("service", "watchdog", "execution_id", c.ExecutionID,
				"node", c.Node, "computation_id", c.ID),
		}
	})
}

// jitter spreads d by ±20%.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// Receive implements actor.Actor.
func (w *watchdog) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		w.timers = scheduler.NewTimerScheduler(ctx)
		w.lastOK = time.Now()
		w.schedule(ctx, jitter(w.interval))
	case beat:
		w.beat(ctx)
	case beatResult:
		w.handle(ctx, msg)
	case *actor.Stopping, *actor.Restarting:
		// protoactor timers are not tied to the actor's life.
		if w.cancelNext != nil {
			w.cancelNext()
		}
	}
}

func (w *watchdog) schedule(ctx actor.Context, d time.Duration) {
	w.cancelNext = w.timers.SendOnce(d, ctx.Self(), beat{})
}

func (w *watchdog) beat(ctx actor.Context) {
	if h := w.env.hooks.SuppressHeartbeat; h != nil && h(w.c) {
		w.schedule(ctx, jitter(w.interval))
		return
	}
	ctx.Send(w.env.heartbeats, beatRequest{ref: w.c.Ref(), replyTo: ctx.Self()})
}

func (w *watchdog) handle(ctx actor.Context, res beatResult) {
	switch {
	case res.err != nil || res.beat == persistence.BeatBusy:
		// Not known to be alive: try again soon, while the heartbeat deadline can still be met.
		w.failures++
		retry := min(w.interval/4<<w.failures, w.interval)
		cause := res.err
		if cause == nil {
			cause = errors.New("its row was locked")
		}
		if time.Since(w.lastOK)+retry >= w.timeout {
			ctx.Send(ctx.Parent(), claimLost{reason: fmt.Sprintf("heartbeat deadline can no longer be met: %v", cause)})
			return
		}
		if res.err != nil {
			w.logger.Warn("heartbeat failed; retrying", "error", res.err, "retry_in", retry)
		}
		w.schedule(ctx, retry)
	case res.beat == persistence.BeatLost:
		ctx.Send(ctx.Parent(), claimLost{reason: "claim lost: the computation was abandoned or reclaimed"})
	default:
		w.lastOK, w.failures = time.Now(), 0
		w.schedule(ctx, jitter(w.interval))
	}
}
