package actors

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"

	"github.com/journey-go/journey/internal/telemetry"
	"github.com/journey-go/journey/persistence"
)

// Defaults of the dispatcher.
const (
	DefaultMaxWorkers   = 100
	DefaultPollInterval = time.Second
	// DefaultMaxValueBytes caps the JSON encoding of a function's result: 1 MiB.
	DefaultMaxValueBytes = 1 << 20
	claimTimeout         = 10 * time.Second
)

// DispatcherConfig configures the dispatcher of one replica.
type DispatcherConfig struct {
	Store     *persistence.Store
	ReplicaID string
	// MaxWorkers caps the functions running at once on this replica, and the attempts whose
	// outcomes wait to be recorded. Default 100.
	MaxWorkers int
	// PollInterval is the fallback poll for missed notifications. Default 1s.
	PollInterval time.Duration
	// MaxValueBytes caps the JSON encoding of a function's result: a larger one fails the
	// attempt for good. Default 1 MiB.
	MaxValueBytes int
	Logger        *slog.Logger
	// Base is the parent context of every computation's function.
	Base context.Context
	// Running, if set, counts the claimed attempts whose goroutine has not ended, so that a stop
	// can wait for them.
	Running *sync.WaitGroup
	// Orphaned, if set, is set by a stop that no longer waits for the running functions: those
	// write nothing when they return.
	Orphaned *atomic.Bool
	// Gate, if set, lets the caller end the claims even while the dispatcher is busy.
	Gate *ClaimGate
	// Local, if set, is the dispatcher's side of the store's Local: the attempts that this
	// replica's writes claim as they make them are spawned here, in the dispatcher's free workers.
	Local *Local
	Hooks Hooks
	// Telemetry records the spans and metrics of the computations. Default: none.
	Telemetry *telemetry.Telemetry
}

// Wake asks the dispatcher to claim now: new work may be available.
type Wake struct{}

// Promote tells the dispatcher that work may be due behind a concurrency key or a limit, which
// it promotes before it claims (persistence.PayloadPromote).
type Promote struct{}

// CancelExecution tells the dispatcher that an execution was canceled: its computations here have
// their contexts canceled, and end CANCELED with their outcome.
type CancelExecution struct{ ID string }

// runningAttempt is a computation actor, and its attempt's execution.
type runningAttempt struct {
	pid       *actor.PID
	execution string
}

// StopClaiming makes the dispatcher stop claiming. It closes Drained once no computation runs on
// this replica.
type StopClaiming struct{ Drained chan<- struct{} }

// ClaimGate ends a dispatcher's claims from outside it: a busy dispatcher reads a StopClaiming
// late, and might claim meanwhile. Once Close returns, no claim is in flight and none starts.
type ClaimGate struct {
	mu     sync.Mutex
	closed bool
	ctx    context.Context // the parent of the context of every claim and promotion
	cancel context.CancelFunc
}

// NewClaimGate returns an open gate.
func NewClaimGate() *ClaimGate {
	ctx, cancel := context.WithCancel(context.Background())
	return &ClaimGate{ctx: ctx, cancel: cancel}
}

// Close cancels what waits to claim, and the promotions, waits for a claim in flight to end, and
// lets no other start.
func (g *ClaimGate) Close() {
	g.cancel()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
}

// claim runs fn, with a context that Close cancels, unless the gate is closed.
func (g *ClaimGate) claim(fn func(ctx context.Context)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		fn(g.ctx)
	}
}

// ClaimResult is what one claim round did, for tests and logs.
type ClaimResult struct {
	Claimed int
	Running int
}

type pollTick struct{}

// claimNow runs a claim round. Wakes are folded into it, so that a burst of notifications queues
// one round, not one each, and a StopClaiming never waits behind a long queue.
type claimNow struct{}

type dispatcher struct {
	cfg     DispatcherConfig
	running map[string]runningAttempt // the computation actors, by PID
	// computing holds those of running whose function has not returned: each holds a worker.
	// The others wait for their outcome to be recorded.
	computing   map[string]bool
	env         *computationEnv
	logger      *slog.Logger
	timers      *scheduler.TimerScheduler
	cancelPoll  scheduler.CancelFunc
	claimQueued bool
	filled      bool // the last claim round took as many computations as there were free workers
	draining    bool
	paused      bool            // the replica heartbeat is failing
	drained     chan<- struct{} // closed, then nil, once draining and nothing runs
}

// NewDispatcher returns the props of a dispatcher actor.
func NewDispatcher(cfg DispatcherConfig) *actor.Props {
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = DefaultMaxWorkers
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.MaxValueBytes <= 0 {
		cfg.MaxValueBytes = DefaultMaxValueBytes
	}
	if cfg.Base == nil {
		cfg.Base = context.Background()
	}
	logger := cfg.Logger.With("service", "dispatcher")
	if cfg.Running == nil {
		cfg.Running = new(sync.WaitGroup)
	}
	if cfg.Orphaned == nil {
		cfg.Orphaned = new(atomic.Bool)
	}
	if cfg.Gate == nil {
		cfg.Gate = NewClaimGate()
	}
	if cfg.Local == nil {
		cfg.Local = NewLocal(cfg.ReplicaID)
	}
	env := &computationEnv{store: cfg.Store, replicaID: cfg.ReplicaID, logger: cfg.Logger, base: cfg.Base,
		running: cfg.Running, orphaned: cfg.Orphaned, hooks: cfg.Hooks, maxValueBytes: cfg.MaxValueBytes, tel: telemetry.Or(cfg.Telemetry)}
	return actor.PropsFromProducer(func() actor.Actor {
		return &dispatcher{cfg: cfg, env: env, logger: logger, running: map[string]runningAttempt{}, computing: map[string]bool{}}
	}, actor.WithSupervisor(stopStrategy))
}

// promoteDue makes due work AVAILABLE (Store.PromoteDue), unless the dispatcher drains.
func (d *dispatcher) promoteDue() {
	if d.draining {
		return
	}
	// Under the gate's context too, so that closing the gate ends a slow promotion.
	pctx, cancel := context.WithTimeout(d.cfg.Gate.ctx, claimTimeout)
	defer cancel()
	if _, err := d.cfg.Store.PromoteDue(pctx); err != nil && d.cfg.Gate.ctx.Err() == nil {
		d.logger.Warn("promoting due computations failed", "error", err)
	}
}

// minRatePoll bounds how soon a poll for a rate limit's window comes after the last one.
const minRatePoll = 10 * time.Millisecond

// nextPoll is the wait before the next poll: PollInterval, or less if a rate limit's window has
// room for waiting attempts before then (Store.RateWake), which nothing else announces.
func (d *dispatcher) nextPoll() time.Duration {
	wait := d.cfg.PollInterval
	if in, ok := d.cfg.Store.RateWake(); ok && in < wait {
		wait = max(in, minRatePoll)
	}
	return wait
}

// Receive implements actor.Actor.
func (d *dispatcher) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		d.env.heartbeats = ctx.Spawn(heartbeatsProps(d.cfg.Store, d.cfg.ReplicaID, d.cfg.Logger, d.cfg.Hooks))
		d.env.system, d.env.flight = ctx.ActorSystem(), new(inflight)
		d.env.completer = ctx.Spawn(completerProps(d.cfg.Store, d.env.tel, d.cfg.Logger, d.env.flight))
		d.env.workers = newWorkers(computationWorkers)
		d.timers = scheduler.NewTimerScheduler(ctx)
		d.cancelPoll = d.timers.SendOnce(d.cfg.PollInterval, ctx.Self(), pollTick{})
		system, self := ctx.ActorSystem(), ctx.Self()
		d.cfg.Local.attach(func(msg localWork) { system.Root.Send(self, msg) }, d.cfg.Running)
		d.runOnce(ctx)
	case Wake:
		d.queueClaim(ctx)
	case claimNow:
		d.claimQueued = false
		d.runOnce(ctx)
	case Promote:
		d.promoteDue()
		d.runOnce(ctx)
	case pollTick:
		d.promoteDue()
		d.runOnce(ctx)
		// The next poll is timed from the end of this one: a slow round never stacks up polls.
		d.cancelPoll = d.timers.SendOnce(d.nextPoll(), ctx.Self(), pollTick{})
	case localWork:
		d.spawnLocal(ctx, msg)
	case functionReturned:
		// The worker is free before the outcome is recorded, so that the claims of the next
		// computations overlap the completer's transactions.
		delete(d.computing, msg.id)
		d.publish()
		if d.filled {
			d.queueClaim(ctx)
		}
	case *actor.Terminated:
		delete(d.running, msg.Who.Id)
		delete(d.computing, msg.Who.Id)
		d.publish()
		d.checkDrained(ctx)
		// A freed worker claims only if the last round filled every free worker, so that work
		// may be waiting. Otherwise none was, and new work announces itself (Wake), or the poll
		// finds it: a claim at each end was most of the claims at 400 executions/s, nearly all
		// of them empty.
		if d.filled {
			d.queueClaim(ctx)
		}
	case Pause:
		d.paused = true
		d.publish()
	case Resume:
		d.paused = false
		d.publish()
		d.queueClaim(ctx)
	case CancelExecution:
		for _, r := range d.running {
			if r.execution == msg.ID {
				ctx.Send(r.pid, executionCanceled{})
			}
		}
	case StopClaiming:
		d.draining, d.drained = true, msg.Drained
		d.publish()
		d.checkDrained(ctx)
	case *actor.Stopping:
		d.cfg.Local.publish(0)
		d.cancelPoll()
	case *actor.Stopped: // the computations, its children, have stopped
		d.env.workers.close()
	}
}

// queueClaim queues a claim round unless one is queued already.
func (d *dispatcher) queueClaim(ctx actor.Context) {
	if !d.claimQueued {
		d.claimQueued = true
		ctx.Send(ctx.Self(), claimNow{})
	}
}

func (d *dispatcher) checkDrained(ctx actor.Context) {
	if d.draining && len(d.running) == 0 && d.drained != nil && d.cfg.Local.outstanding() == 0 {
		close(d.drained)
		d.drained = nil
	}
}

// claimedPerWorker bounds the attempts a replica holds, MaxWorkers times this: at most
// MaxWorkers run their functions, and the others have returned and wait for the completer to
// record their outcomes, with their watchdogs still heartbeating. The deeper that queue, the
// bigger the completer's batches while claims go on: journey bench -n 30000, three runs of each
// alternated, 5,519 computations/s with 2 against 6,286 with 4, and in another round 6,472 with
// 4 against 6,039 with 8; -duration 15s, 4,430 with 2 and 5,056 with 4.
const claimedPerWorker = 4

// computationWorkers is how many goroutines wait to run the mailboxes of a replica's computations
// and watchdogs (see workers).
const computationWorkers = 64

// runOnce claims as many computations as there are free workers and spawns an actor for each,
// through the gate, so that what it claims is spawned before the gate closes.
func (d *dispatcher) runOnce(ctx actor.Context) ClaimResult {
	running := len(d.running)
	// The workers reserved by this replica's writes are not free; nor may the writes reserve
	// those this claim may fill, until it has.
	free := d.cfg.Local.hold(d.free())
	if d.draining || d.paused || free <= 0 {
		d.filled = free <= 0
		d.publish()
		return ClaimResult{Running: running}
	}
	var claimed []*persistence.Computation
	d.cfg.Gate.claim(func(gctx context.Context) {
		cctx, cancel := context.WithTimeout(gctx, claimTimeout)
		defer cancel()
		if h := d.cfg.Hooks.Claiming; h != nil {
			h(cctx)
		}
		if cctx.Err() != nil {
			return // the gate closed before the claim went out
		}
		// Once sent, the claim runs to its end, which Close waits for: canceled, it might still
		// commit on the server, and leave claimed attempts that no actor here releases.
		sctx, scancel := context.WithTimeout(context.WithoutCancel(cctx), claimTimeout)
		defer scancel()
		var err error
		if claimed, err = d.cfg.Store.Claim(sctx, d.cfg.ReplicaID, free); err != nil {
			if gctx.Err() == nil { // not a stop
				d.logger.Warn("claiming failed", "error", err)
			}
			return
		}
		for _, c := range claimed {
			g, n, ok := d.cfg.Store.GraphOf(c)
			if !ok { // cannot happen: claims are filtered by the served graphs
				d.logger.Error("claimed a computation of an unknown graph", "graph", c.GraphKey, "node", c.Node)
				continue
			}
			if c.AvailableAt != nil && c.ClaimedAt != nil {
				d.env.tel.Claimed(cctx, g, c.Node, c.ClaimedAt.Sub(*c.AvailableAt))
			}
			pid := spawnComputation(ctx, d.env, c, g, n)
			d.running[pid.Id], d.computing[pid.Id] = runningAttempt{pid, c.ExecutionID}, true
		}
	})
	d.filled = len(claimed) == free
	d.publish()
	if h := d.cfg.Hooks.Claimed; h != nil {
		h(len(claimed))
	}
	return ClaimResult{Claimed: len(claimed), Running: running + len(claimed)}
}

// free is how many more attempts this replica may take: at most MaxWorkers functions run, and
// the attempts claimed but not yet recorded stay under claimedPerWorker times MaxWorkers.
func (d *dispatcher) free() int {
	return min(d.cfg.MaxWorkers-len(d.computing), claimedPerWorker*d.cfg.MaxWorkers-len(d.running))
}

// publish tells Local how many workers the writes may reserve: none while the dispatcher drains
// or pauses.
func (d *dispatcher) publish() {
	free := d.free()
	if d.draining || d.paused {
		free = 0
	}
	d.cfg.Local.publish(free)
}

// spawnLocal spawns the attempts that a write of this replica claimed as it made them, in the
// workers it reserved, and ends those reservations. It spawns them even while draining or paused,
// or once the replica's stop has cancelled their context (they are released then): they are
// claimed, as those of a claim that was in flight. A stop waits for them as for the others.
func (d *dispatcher) spawnLocal(ctx actor.Context, w localWork) {
	for _, c := range w.claimed {
		g, n, ok := d.cfg.Store.GraphOf(c)
		if !ok { // cannot happen: a write loads only the executions of served graphs
			d.logger.Error("handed a computation of an unknown graph", "graph", c.GraphKey, "node", c.Node)
			continue
		}
		d.env.tel.Claimed(context.Background(), g, c.Node, 0) // claimed as it was made
		pid := spawnComputation(ctx, d.env, c, g, n)
		d.running[pid.Id], d.computing[pid.Id] = runningAttempt{pid, c.ExecutionID}, true
	}
	// Each attempt counts among the running from its spawn on; its reservation counted until then.
	d.cfg.Running.Add(-w.reserved)
	d.cfg.Local.settle(w.reserved)
	d.publish()
	d.checkDrained(ctx)
}
