// Package sweeper holds the sweeper actor. Any replica may sweep; each pass is single-flight
// across replicas through a transaction-level advisory lock. A pass abandons RUNNING computations
// past their deadline or heartbeat deadline, or held by a replica that stopped heartbeating
// (recording which), retries them or fails their node, promotes PENDING computations that are
// due, prunes the heartbeat rows of long-gone replicas, and advances the executions whose ticks
// have come due. The decisions are made in SQL against the
// Store's clock, so tests move an injected clock instead of sleeping.
//
// It may import graph, persistence and internal packages, never actors or the root package.
package sweeper

import (
	"context"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/journey-go/journey/persistence"
)

// Defaults of the sweeper.
const (
	DefaultInterval          = 5 * time.Second
	DefaultBatchSize         = 100
	DefaultReplicaStaleAfter = 20 * time.Second
	DefaultReplicaRetention  = 24 * time.Hour
	passTimeout              = 30 * time.Second
)

// Config configures a Sweeper.
type Config struct {
	Store *persistence.Store
	// Interval between passes. Default 5s.
	Interval time.Duration
	// BatchSize caps the rows abandoned per pass; a full batch is followed by another pass at once.
	// Default 100.
	BatchSize int
	// ReplicaStaleAfter: the RUNNING attempts of a replica whose heartbeat is older, or missing,
	// are abandoned. Default 20s.
	ReplicaStaleAfter time.Duration
	// ReplicaRetention: the heartbeat rows of replicas silent for longer are deleted. Default 24h.
	ReplicaRetention time.Duration
	Logger           *slog.Logger
}

// Sweeper runs sweep passes.
type Sweeper struct {
	cfg    Config
	logger *slog.Logger
}

// New returns a Sweeper with defaults filled in.
func New(cfg Config) *Sweeper {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.ReplicaStaleAfter <= 0 {
		cfg.ReplicaStaleAfter = DefaultReplicaStaleAfter
	}
	if cfg.ReplicaRetention <= 0 {
		cfg.ReplicaRetention = DefaultReplicaRetention
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Sweeper{cfg: cfg, logger: cfg.Logger.With("service", "sweeper")}
}

// RunOnce runs one pass and logs what it did.
func (s *Sweeper) RunOnce(ctx context.Context) (persistence.SweepResult, error) {
	res, err := s.cfg.Store.Sweep(ctx, persistence.SweepOptions{
		Limit: s.cfg.BatchSize, ReplicaStaleAfter: s.cfg.ReplicaStaleAfter, ReplicaRetention: s.cfg.ReplicaRetention,
	})
	if err != nil {
		return res, err
	}
	woken, err := s.cfg.Store.WakeDue(ctx, s.cfg.BatchSize)
	if err != nil {
		return res, err
	}
	if woken > 0 {
		s.logger.Debug("executions with due ticks advanced", "count", woken)
	}
	for _, c := range res.Abandoned {
		s.logger.Warn("computation abandoned", "execution_id", c.ExecutionID, "node", c.Node,
			"computation_id", c.ID, "attempt", c.Attempt, "reason", *c.Error)
	}
	if res.Promoted > 0 {
		s.logger.Debug("computations promoted", "count", res.Promoted)
	}
	if res.Pruned > 0 {
		s.logger.Info("heartbeat rows of long-gone replicas pruned", "count", res.Pruned)
	}
	return res, nil
}

type tick struct{}

// Props returns the sweeper actor: it runs a pass every Interval, and at once again after a full
// batch.
func (s *Sweeper) Props() *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &sweeperActor{s: s} })
}

type sweeperActor struct {
	s      *Sweeper
	timers *scheduler.TimerScheduler
	cancel scheduler.CancelFunc
}

// Receive implements actor.Actor.
func (a *sweeperActor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		a.timers = scheduler.NewTimerScheduler(ctx)
		a.cancel = a.timers.SendOnce(a.s.cfg.Interval, ctx.Self(), tick{})
	case tick:
		pctx, cancel := context.WithTimeout(context.Background(), passTimeout)
		res, err := a.s.RunOnce(pctx)
		cancel()
		next := a.s.cfg.Interval
		if err != nil {
			a.s.logger.Warn("sweep failed", "error", err)
		} else if len(res.Abandoned) >= a.s.cfg.BatchSize {
			next = 0
		}
		a.cancel = a.timers.SendOnce(next, ctx.Self(), tick{})
	case *actor.Stopping, *actor.Restarting:
		if a.cancel != nil {
			a.cancel()
		}
	}
}
