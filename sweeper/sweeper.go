package sweeper

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

// Defaults of the sweeper.
const (
	DefaultInterval         = 5 * time.Second
	DefaultBatchSize        = 100
	DefaultReplicaRetention = 24 * time.Hour
	// DefaultStrandedEvery is how often the sweep lease holder looks for stranded graph versions.
	DefaultStrandedEvery = time.Minute
	// DefaultInsightsEvery is how often the sweep lease holder rolls the insights up.
	DefaultInsightsEvery = 10 * time.Second
	// DefaultRepairEvery is how often the sweep lease holder repairs what a crash left after a
	// commit (persistence.Store.Repair).
	DefaultRepairEvery = 10 * time.Second
	// DefaultRetention is how long finished attempts, value history and delivered notifications
	// are kept.
	DefaultRetention = 7 * 24 * time.Hour
	passTimeout      = 30 * time.Second
)

// Config configures a Sweeper.
type Config struct {
	Store *persistence.Store
	// ReplicaID names this replica in the sweep lease.
	ReplicaID string
	// Interval between the starts of two passes; a pass that takes longer is followed by the
	// next at once. Default 5s.
	Interval time.Duration
	// LeaseTTL is how long the sweep lease lasts without a pass: a frozen or dead sweeper delays
	// the others by this at most. Default 3 × Interval.
	LeaseTTL time.Duration
	// BatchSize caps the rows abandoned per pass, and the rows deleted per table and pass; a full
	// batch of abandonments is followed by another pass at once, and one of deletions soon after.
	// Default 100.
	BatchSize int
	// ReplicaRetention: the heartbeat rows of replicas silent for longer are deleted. Default 24h.
	ReplicaRetention time.Duration
	// Retention: finished attempts (but the newest of each node), value history and delivered
	// notifications older than this are deleted. Default 7 days; negative keeps them forever.
	Retention time.Duration
	// StrandedEvery is how often the replica that holds the sweep lease looks for executions
	// with work left on a graph version that no live replica serves, and logs a warning for
	// each such version. Default 1 minute.
	StrandedEvery time.Duration
	// InsightsEvery is how often the replica that holds the sweep lease brings the cells behind
	// Insights up to date, apart from its passes. Default 10 seconds.
	InsightsEvery time.Duration
	// RepairEvery is how often the replica that holds the sweep lease repairs what a crash of a
	// replica left undone after a commit, or a replica that had not heard of a change
	// (persistence.Store.Repair: the children that do not follow their parent's cancel, pause or
	// archive, the map nodes whose children have all ended and that wait, the waiting attempts of
	// archived executions, the PAUSED attempts that no pause holds), apart from its passes. Default
	// 2 × Interval, at most DefaultRepairEvery.
	RepairEvery time.Duration
	Logger      *slog.Logger
	// Telemetry counts the abandonments. Default: none.
	Telemetry *telemetry.Telemetry
	// Halted, if set, reports whether the replica has halted (another process took its id, or
	// the schema moved past its release): it sweeps nothing more, and Release leaves the lease,
	// which its id may name for another process.
	Halted func() bool
}

// sampleTimeout bounds the query of a sample of the active computations.
const sampleTimeout = 5 * time.Second

// Sweeper runs sweep passes.
type Sweeper struct {
	cfg    Config
	logger *slog.Logger
	// sweeping is true while the last pass held the sweep lease.
	sweeping atomic.Bool
	// strandedAt is when the last look for stranded versions ran (see Config.StrandedEvery).
	strandedAt time.Time
	// rolledAt is when the insights were last rolled up (see Config.InsightsEvery); rollBusy
	// is true while a roll runs, in a goroutine of its own that rolling counts and rollCtx
	// (canceled by stopRoll) stops.
	rolledAt time.Time
	rollBusy atomic.Bool
	// repairedAt is when the last repair began (see Config.RepairEvery); repairBusy is true while
	// one runs, in a goroutine of its own, which rolling counts and rollCtx stops, as a roll's.
	repairedAt time.Time
	repairBusy atomic.Bool
	rolling    sync.WaitGroup
	rollCtx    context.Context
	stopRoll   context.CancelFunc
}

// New returns a Sweeper with defaults filled in.
func New(cfg Config) *Sweeper {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultBatchSize
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 3 * cfg.Interval
	}
	if cfg.Retention == 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.StrandedEvery <= 0 {
		cfg.StrandedEvery = DefaultStrandedEvery
	}
	if cfg.InsightsEvery <= 0 {
		cfg.InsightsEvery = DefaultInsightsEvery
	}
	if cfg.RepairEvery <= 0 {
		cfg.RepairEvery = min(2*cfg.Interval, DefaultRepairEvery)
	}
	if cfg.ReplicaRetention <= 0 {
		cfg.ReplicaRetention = DefaultReplicaRetention
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Telemetry = telemetry.Or(cfg.Telemetry)
	s := &Sweeper{cfg: cfg, logger: cfg.Logger.With("service", "sweeper")}
	s.rollCtx, s.stopRoll = context.WithCancel(context.Background())
	return s
}

// SampleStates counts the active computations of the served graphs, if this replica holds the
// sweep lease: one replica samples them for all. ok is false on the others.
func (s *Sweeper) SampleStates(ctx context.Context) (counts []telemetry.StateCount, ok bool, err error) {
	if !s.sweeping.Load() {
		return nil, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	counts, err = s.cfg.Store.ActiveCounts(ctx)
	return counts, err == nil, err
}

// CarryOut carries out the open requests of the served graphs (journey retry, archive,
// unarchive), and logs what it did. Each replica runs it when a request is announced, and at
// each pass, whether it holds the sweep lease or not.
func (s *Sweeper) CarryOut(ctx context.Context) (int, error) {
	n, err := s.cfg.Store.CarryOut(ctx, s.cfg.ReplicaID, s.cfg.BatchSize)
	if n > 0 {
		s.logger.Info("requests carried out", "count", n)
	}
	return n, err
}

// options are the options of a pass, or of a pass of retention alone.
func (s *Sweeper) options(pruneOnly bool) persistence.SweepOptions {
	return persistence.SweepOptions{Holder: s.cfg.ReplicaID, LeaseTTL: s.cfg.LeaseTTL, Limit: s.cfg.BatchSize,
		ReplicaRetention: s.cfg.ReplicaRetention, Retention: max(s.cfg.Retention, 0), PruneOnly: pruneOnly}
}

// RunOnce runs one pass and logs what it did.
func (s *Sweeper) RunOnce(ctx context.Context) (persistence.SweepResult, error) {
	res, err := s.cfg.Store.Sweep(ctx, s.options(false))
	s.sweeping.Store(err == nil && !res.Skipped)
	for _, c := range res.Abandoned {
		if g, _, ok := s.cfg.Store.GraphOf(c); ok {
			s.cfg.Telemetry.Finished(ctx, g, c.Node, telemetry.OutcomeAbandoned, persistence.ReasonCategory(*c.Error))
		}
	}
	if err != nil || res.Skipped {
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
	if res.Deleted > 0 {
		s.logger.Debug("rows past their retention deleted", "count", res.Deleted)
	}
	s.warnStranded(ctx)
	s.rollInsights()
	s.repair()
	return res, nil
}

// repair starts repairing what a crash left after a commit (persistence.Store.Repair), apart from
// the pass, every RepairEvery at most, unless the last repair still runs. Release stops it.
func (s *Sweeper) repair() {
	s.background(&s.repairedAt, s.cfg.RepairEvery, &s.repairBusy, func(ctx context.Context) {
		n, err := s.cfg.Store.Repair(ctx, s.cfg.BatchSize)
		switch {
		case err != nil && ctx.Err() == nil:
			s.logger.Warn("repairing what a crash left after a commit failed; the next repair tries again", "error", err)
		case n > 0:
			s.logger.Info("repaired what a crash or an unheard change left: children made to follow their parent, map nodes woken, "+
				"waiting attempts of archived executions canceled, attempts no pause holds made ready", "executions", n)
		}
	})
}

// rollInsights starts bringing the cells behind Insights up to date, apart from the pass, every
// InsightsEvery at most, unless the last roll still runs. Release stops it.
func (s *Sweeper) rollInsights() {
	s.background(&s.rolledAt, s.cfg.InsightsEvery, &s.rollBusy, func(ctx context.Context) {
		left, err := s.cfg.Store.RollInsights(ctx, "", persistence.RollInBackground)
		switch {
		case err != nil && ctx.Err() == nil:
			s.logger.Warn("rolling the insights up failed; the next pass tries again", "error", err)
		case left > 0:
			s.logger.Debug("insights rolled up in part", "minutes_left", left)
		}
	})
}

// background runs job in a goroutine of its own, apart from the pass, if every has passed since
// *last and the job's last run (busy) has ended; Release stops it, through its context.
func (s *Sweeper) background(last *time.Time, every time.Duration, busy *atomic.Bool, job func(context.Context)) {
	if !due(last, every) || !busy.CompareAndSwap(false, true) {
		return
	}
	s.rolling.Add(1)
	go func() {
		defer s.rolling.Done()
		defer busy.Store(false)
		job(s.rollCtx)
	}()
}

// due reports whether every has passed since *last, and if so sets *last to now: a chore that a
// pass does every so often.
func due(last *time.Time, every time.Duration) bool {
	if time.Since(*last) < every {
		return false
	}
	*last = time.Now()
	return true
}

// warnStranded logs a warning for each graph version that no live replica serves while some of
// its executions have work left, every StrandedEvery at most.
func (s *Sweeper) warnStranded(ctx context.Context) {
	if !due(&s.strandedAt, s.cfg.StrandedEvery) {
		return
	}
	stranded, err := s.cfg.Store.Stranded(ctx)
	if err != nil {
		s.logger.Warn("looking for stranded graph versions failed", "error", err)
		return
	}
	for _, v := range stranded {
		s.logger.Warn("executions have work left on a graph version that no live replica serves: keep or start a "+
			"replica that serves it, or move them to a compatible version (journey graphs move)",
			"graph_version", v.Key, "executions", v.Executions)
	}
}

// Release gives up the sweep lease, at a graceful stop, so that another replica sweeps at once.
func (s *Sweeper) Release(ctx context.Context) error {
	s.stopRoll()
	s.rolling.Wait()
	s.sweeping.Store(false)
	if s.halted() {
		return nil
	}
	return s.cfg.Store.ReleaseLease(ctx, s.cfg.Store.SweepLease(), s.cfg.ReplicaID)
}

// halted reports whether the replica has halted (Config.Halted).
func (s *Sweeper) halted() bool { return s.cfg.Halted != nil && s.cfg.Halted() }

type tick struct{}

// catchUp asks the sweeper actor for a pass of retention alone, between two timed passes.
type catchUp struct{}

// Requests asks the sweeper actor to carry out the open requests now.
type Requests struct{}

// Pass asks the sweeper actor to run a pass now, between its timed ones; it closes Done once the
// pass is over. A test that moves the clock sends it, so that what the move made due happens at
// once.
type Pass struct{ Done chan<- struct{} }

// Props returns the sweeper actor: it runs a pass every Interval, at once again after a full
// batch of abandonments; and after a full batch of deletions, passes of retention alone, soon
// after one another, until retention has caught up.
func (s *Sweeper) Props() *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &sweeperActor{s: s} })
}

type sweeperActor struct {
	s      *Sweeper
	timers *scheduler.TimerScheduler
	cancel scheduler.CancelFunc
	// catchingUp cancels the catch-up pass of retention scheduled, nil if none is.
	catchingUp scheduler.CancelFunc
}

// Receive implements actor.Actor.
func (a *sweeperActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.timers = scheduler.NewTimerScheduler(ctx)
		a.cancel = a.timers.SendOnce(a.s.cfg.Interval, ctx.Self(), tick{})
	case Requests:
		a.carryOut()
	case Pass:
		a.pass()
		close(msg.Done)
	case tick:
		// Passes start Interval apart, not Interval after the end of the last one: under load a
		// pass takes long, and what comes due during it (the work of a replica that has just
		// gone stale) would wait for the pass and then a whole Interval more. A pass slower than
		// Interval is followed by the next at once, never by two at a time.
		began := time.Now()
		next := a.s.cfg.Interval
		full, behind := a.pass()
		if full {
			next = 0
		}
		a.cancel = a.timers.SendOnce(max(next-time.Since(began), 0), ctx.Self(), tick{})
		if behind {
			a.catchUpAfter(ctx, began)
		}
	case catchUp:
		a.catchingUp = nil
		began := time.Now()
		if a.prune() {
			a.catchUpAfter(ctx, began)
		}
	case *actor.Stopping, *actor.Restarting:
		for _, cancel := range []scheduler.CancelFunc{a.cancel, a.catchingUp} {
			if cancel != nil {
				cancel()
			}
		}
	}
}

// catchUpAfter schedules a pass of retention alone, unless one is: retention catches up with half
// of one session at most, after a pause as long as the pass that began at began, so that the
// replicas' work keeps the database's other half. The passes of retention alone leave the
// search for expired attempts, and the rest of a pass, to the timed passes: in a catch-up beside
// a busy replica, each pass read its 2,000 running attempts again, 28 times as often.
func (a *sweeperActor) catchUpAfter(ctx actor.Context, began time.Time) {
	if a.catchingUp == nil {
		a.catchingUp = a.timers.SendOnce(time.Since(began), ctx.Self(), catchUp{})
	}
}

// prune runs a pass of retention alone, logging a failure, and reports whether it left retention
// behind.
func (a *sweeperActor) prune() (behind bool) {
	if a.s.halted() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), passTimeout)
	defer cancel()
	res, err := a.s.cfg.Store.Sweep(ctx, a.s.options(true))
	if err != nil {
		a.s.logger.Warn("retention failed", "error", err)
		return false
	}
	if res.Deleted > 0 {
		a.s.logger.Debug("rows past their retention deleted", "count", res.Deleted)
	}
	return res.RetentionBehind
}

// pass carries out the open requests and runs a sweep pass, logging a failure: the next pass
// tries again. It reports whether the pass abandoned a full batch, so that another should follow
// at once, and whether it left retention behind, so that another should follow soon: else an
// Interval's batch would be all that retention deletes, 20 rows a second per table by default,
// less than a busy replica makes.
func (a *sweeperActor) pass() (full, behind bool) {
	if a.s.halted() {
		return false, false
	}
	a.carryOut()
	ctx, cancel := context.WithTimeout(context.Background(), passTimeout)
	defer cancel()
	res, err := a.s.RunOnce(ctx)
	if err != nil {
		a.s.logger.Warn("sweep failed", "error", err)
		return false, false
	}
	return len(res.Abandoned) >= a.s.cfg.BatchSize, res.RetentionBehind
}

// carryOut carries out the open requests, logging a failure: the next pass tries again.
func (a *sweeperActor) carryOut() {
	if a.s.halted() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), passTimeout)
	defer cancel()
	if _, err := a.s.CarryOut(ctx); err != nil {
		a.s.logger.Warn("carrying out requests failed", "error", err)
	}
}
