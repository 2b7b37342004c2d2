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
	// Identity is the process that holds the replica's row.
	Identity persistence.Identity
	// OnHalt, if set, is called once the replica halts: a heartbeat found its row taken by
	// another process (persistence.ErrReplicaIDInUse), or the schema's oldest release newer than
	// this one (persistence.ErrReleaseRetired). Its dispatcher claims nothing more, and it writes
	// no more heartbeats.
	OnHalt func(err error)
}

// Pause makes the dispatcher stop claiming until Resume.
type Pause struct{}

// Resume lets a paused dispatcher claim again.
type Resume struct{}

// Halt halts the replica for Err, as a heartbeat that found its row taken does (see
// ReplicaConfig.OnHalt).
type Halt struct{ Err error }

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
	halted  error
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
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		r.timers = scheduler.NewTimerScheduler(ctx)
		r.cancel = r.timers.SendOnce(r.cfg.Interval, ctx.Self(), replicaTick{})
	case replicaTick:
		r.runOnce(ctx)
		r.cancel = r.timers.SendOnce(r.cfg.Interval, ctx.Self(), replicaTick{})
	case Halt:
		if r.halted == nil {
			r.halt(ctx, msg.Err)
		}
	case *actor.Stopping, *actor.Restarting:
		r.cancel()
	}
}

// runOnce writes one heartbeat. A write may take up to half of StaleAfter, longer than an
// interval: on a loaded machine a slow heartbeat still keeps the replica alive, where one given up
// early (and its connection with it) would make the next slower still.
func (r *replicaHeartbeat) runOnce(ctx actor.Context) {
	if r.halted != nil {
		return
	}
	hctx, cancel := context.WithTimeout(context.Background(), max(r.cfg.Interval, r.cfg.StaleAfter/2))
	beat, err := r.cfg.Store.ReplicaHeartbeat(hctx, r.cfg.ReplicaID, r.cfg.Identity, r.cfg.StaleAfter, false)
	cancel()
	switch {
	case err == nil && beat.Taken:
		r.halt(ctx, fmt.Errorf("%w: another process has taken the row of replica %s; this one claims nothing more: "+
			"give each process a ReplicaID of its own, and stop this one", persistence.ErrReplicaIDInUse, r.cfg.ReplicaID))
		return
	case err == nil && beat.Oldest > persistence.Release:
		r.halt(ctx, persistence.RetiredError(r.cfg.Store.Schema(), beat.Oldest, ""))
		return
	case err == nil && r.cfg.OnBeat != nil:
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

// halt stops the replica's claims and heartbeats for good, for err.
func (r *replicaHeartbeat) halt(ctx actor.Context, err error) {
	r.halted = err
	r.logger.Error("the replica halts: it claims nothing more", "error", err)
	ctx.Send(r.cfg.Dispatcher, Pause{})
	if r.cfg.OnHalt != nil {
		r.cfg.OnHalt(err)
	}
}
