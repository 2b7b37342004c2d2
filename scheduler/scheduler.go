package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	timers "github.com/asynkron/protoactor-go/scheduler"

	"github.com/journey-go/journey/persistence"
)

// Defaults of the scheduler.
const (
	// DefaultInterval is the longest the scheduler sleeps between two passes, even with no fire
	// time due sooner.
	DefaultInterval = 5 * time.Second
	// DefaultGrace is how late a fire time may be found and still start under CatchUpNone.
	DefaultGrace = time.Minute
	// DefaultMaxFires caps the executions a schedule starts in one pass (CatchUpEach after a long
	// downtime); the next pass follows at once.
	DefaultMaxFires = 100
	// retryAfter is the wait after a pass that left a due schedule to another replica's lock, or
	// to an error.
	retryAfter = time.Second
	// minWait keeps the timer from spinning when the database's clock runs behind the replica's.
	minWait     = 10 * time.Millisecond
	passTimeout = 30 * time.Second
)

// Config configures a Scheduler.
type Config struct {
	Store     *persistence.Store
	Schedules []Schedule
	// Interval is the longest sleep between two passes. Default DefaultInterval.
	Interval time.Duration
	// Grace is how late a fire time may be found and still start under CatchUpNone. Default
	// DefaultGrace.
	Grace time.Duration
	// MaxFires caps the executions one schedule starts in one pass. Default DefaultMaxFires.
	MaxFires int
	Logger   *slog.Logger
	// Halted, if set, reports whether the replica has halted: it fires nothing more.
	Halted func() bool
}

// Scheduler fires the schedules of one replica.
type Scheduler struct {
	cfg    Config
	logger *slog.Logger
	names  []string
	// recorded are the schedules whose row this process has written once: until then a pass
	// fires each schedule, due or not, so that its row is there, with this replica's definition.
	recorded map[string]bool
}

// New returns a Scheduler with defaults filled in.
func New(cfg Config) *Scheduler {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.MaxFires <= 0 {
		cfg.MaxFires = DefaultMaxFires
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Scheduler{cfg: cfg, logger: cfg.Logger.With("service", "scheduler"), recorded: map[string]bool{}}
	for _, sc := range cfg.Schedules {
		s.names = append(s.names, sc.Name)
	}
	return s
}

// Result is what a pass did.
type Result struct {
	// Fired counts the executions started (an execution found holding its fire time's key
	// counts too: Existing).
	Fired int
	// Locked counts the schedules due that another replica was firing.
	Locked int
	// Now is the time of the pass, by the store's clock.
	Now time.Time
	// Next is the earliest fire time not handled yet, zero if none is left.
	Next time.Time
}

// RunOnce fires what is due: one read of the schedules' rows, then a transaction for each
// schedule due (persistence.FireSchedule), or not recorded yet by this process. An error of one
// schedule is logged, and the others go on; RunOnce returns them all, joined.
func (s *Scheduler) RunOnce(ctx context.Context) (Result, error) {
	var res Result
	if len(s.cfg.Schedules) == 0 {
		return res, nil
	}
	handled, now, err := s.cfg.Store.ScheduleTimes(ctx, s.names)
	if err != nil {
		return res, err
	}
	res.Now = now
	var errs []error
	for _, sc := range s.cfg.Schedules {
		through, ok := handled[sc.Name]
		if ok && s.recorded[sc.Name] {
			if next := sc.Next(through); next.IsZero() || next.After(now) {
				res.Next = earliest(res.Next, next)
				continue
			}
		}
		fired, err := s.cfg.Store.FireSchedule(ctx, sc.ScheduleDef, func(row persistence.ScheduleRow, now time.Time) (persistence.ScheduleFiring, error) {
			return Plan(sc, row, now, s.cfg.Grace, s.cfg.MaxFires), nil
		})
		if err != nil {
			if ctx.Err() == nil {
				s.logger.Warn("firing a schedule failed; the next pass tries again", "schedule", sc.Name, "error", err)
			}
			errs = append(errs, err)
			continue
		}
		if fired.Locked {
			res.Locked++
			continue
		}
		s.recorded[sc.Name] = true
		for i, e := range fired.Started {
			s.logger.Info("schedule fired", "schedule", sc.Name, "fire_time", fired.Fires[i], "execution_id", e.ID,
				"existing", e.Existing)
		}
		res.Fired += len(fired.Started)
		if fired.Row.NextFire != nil {
			res.Next = earliest(res.Next, sc.Next(fired.Row.HandledThrough))
		}
	}
	return res, errors.Join(errs...)
}

// earliest is the earlier of a and b, where the zero time is none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// wait is how long the scheduler sleeps after a pass: until the next fire time, Interval at most.
func (s *Scheduler) wait(res Result, err error) time.Duration {
	wait := s.cfg.Interval
	if !res.Next.IsZero() {
		wait = min(max(res.Next.Sub(res.Now), minWait), wait)
	}
	if err != nil || res.Locked > 0 {
		wait = max(wait, min(retryAfter, s.cfg.Interval))
	}
	return wait
}

func (s *Scheduler) halted() bool { return s.cfg.Halted != nil && s.cfg.Halted() }

type tick struct{}

// Pass asks the scheduler actor for a pass now; it closes Done once the pass is over. New sends
// it, so that the schedules' rows are there when New returns, and so does a move of a test's
// clock.
type Pass struct{ Done chan<- struct{} }

// Props returns the scheduler actor: it runs a pass, then sleeps until the next fire time
// (Interval at most), again and again.
func (s *Scheduler) Props() *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor { return &schedulerActor{s: s} })
}

type schedulerActor struct {
	s      *Scheduler
	timers *timers.TimerScheduler
	cancel timers.CancelFunc
}

// Receive implements actor.Actor.
func (a *schedulerActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		// The first pass is New's Pass, which sets the timer.
		a.timers = timers.NewTimerScheduler(ctx)
	case tick:
		a.pass(ctx)
	case Pass:
		a.pass(ctx)
		close(msg.Done)
	case *actor.Stopping, *actor.Restarting:
		if a.cancel != nil {
			a.cancel()
		}
	}
}

// pass runs a pass, logging a failure, and sets the timer of the next.
func (a *schedulerActor) pass(ctx actor.Context) {
	if a.cancel != nil {
		a.cancel()
	}
	if a.s.halted() {
		return
	}
	pctx, cancel := context.WithTimeout(context.Background(), passTimeout)
	defer cancel()
	res, err := a.s.RunOnce(pctx)
	if err != nil && res.Now.IsZero() {
		a.s.logger.Warn("reading the schedules failed; the next pass tries again", "error", err)
	}
	a.cancel = a.timers.SendOnce(a.s.wait(res, err), ctx.Self(), tick{})
}
