package actors

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/journey-go/journey/persistence"
)

// Defaults of the replica heartbeat.
const (
	DefaultReplicaHeartbeatInterval = 5 * time.Second
	DefaultReplicaStaleAfter        = 20 * time.Second
)

// ReplicaConfig configures the replica heartbeat of one replica.
type ReplicaConfig struct {
	Store     *persistence.Store
	ReplicaID string
	// Interval between heartbeats. Default 5s.
	Interval time.Duration
	// StaleAfter is written into the row, for the operators' views. Default 20s.
	StaleAfter time.Duration
	// Dispatcher is paused while the heartbeat fails, and resumed when it succeeds again.
	Dispatcher *actor.PID
	Logger     *slog.Logger
	// OnBeat, if set, is called after each heartbeat written.
	OnBeat func()
}

// Pause makes the dispatcher stop claiming until Resume.
type Pause struct{}

// Resume lets a paused dispatcher claim again.
type Resume struct{}

type replicaTick struct{}

// replicaHeartbeat upserts the replica's row every interval. A replica that cannot write its
// heartbeat will soon be taken for dead and its work reclaimed, so it stops claiming until the
// heartbeat succeeds again; its watchdogs, failing too, cancel what they can no longer keep.
type replicaHeartbeat struct {
	cfg     ReplicaConfig
	logger  *slog.Logger
	timers  *scheduler.TimerScheduler
	cancel  scheduler.CancelFunc
	failing bool
}

// NewReplicaHeartbeat returns the props of the replica heartbeat actor. The caller writes the
// first heartbeat itself, before anything is claimed.
func NewReplicaHeartbeat(cfg ReplicaConfig) *actor.Props {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultReplicaHeartbeatInterval
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = DefaultReplicaStaleAfter
	}
	return actor.PropsFromProducer(func() actor.Actor {
		return &replicaHeartbeat{cfg: cfg, logger: cfg.Logger.With("service", "replica_heartbeat")}
	})
}

// Receive implements actor.Actor.
func (r *replicaHeartbeat) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		r.timers = scheduler.NewTimerScheduler(ctx)
		r.cancel = r.timers.SendOnce(r.cfg.Interval, ctx.Self(), replicaTick{})
	case replicaTick:
		r.runOnce(ctx)
		r.cancel = r.timers.SendOnce(r.cfg.Interval, ctx.Self(), replicaTick{})
	case *actor.Stopping, *actor.Restarting:
		r.cancel()
	}
}

// runOnce writes one heartbeat. A write may take up to half of StaleAfter, longer than an
// interval: on a loaded machine a slow heartbeat still keeps the replica alive, where one given up
// early (and its connection with it) would make the next slower still.
func (r *replicaHeartbeat) runOnce(ctx actor.Context) {
	hctx, cancel := context.WithTimeout(context.Background(), max(r.cfg.Interval, r.cfg.StaleAfter/2))
	err := r.cfg.Store.ReplicaHeartbeat(hctx, r.cfg.ReplicaID, r.cfg.StaleAfter, false)
	cancel()
	if err == nil && r.cfg.OnBeat != nil {
		r.cfg.OnBeat()
	}
	switch {
	case err != nil && !r.failing:
		r.failing = true
		r.logger.Warn("replica heartbeat failed; claiming stops until it succeeds", "error", err)
		ctx.Send(r.cfg.Dispatcher, Pause{})
	case err != nil:
		r.logger.Warn("replica heartbeat still failing", "error", err)
	case r.failing:
		r.failing = false
		r.logger.Info("replica heartbeat restored; claiming resumes")
		ctx.Send(r.cfg.Dispatcher, Resume{})
	}
}
