package journeytest

import (
	"bytes"
	"cmp"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
	"github.com/journey-go/journey/internal/pgtest"
)

const (
	// DefaultTimeout bounds each wait of the helpers (WaitValue, WaitIdle, RequireValue,
	// RequireFailed), unless the test's deadline (go test -timeout) comes sooner: then a wait ends
	// when nine tenths of the time left have passed, so that its message is printed before the
	// test binary panics.
	DefaultTimeout = 30 * time.Second

	// PollInterval and SweepInterval are the runtime's, unless the Config given to NewWithConfig
	// sets them: shorter than the defaults, so that a lost notification costs a test little.
	// Moving the clock sweeps at once, whatever the interval.
	PollInterval  = 200 * time.Millisecond
	SweepInterval = time.Second

	// stopTimeout bounds the Stop of a runtime when its test ends.
	stopTimeout = 10 * time.Second
	// idlePoll is how often WaitIdle looks at the execution's attempts.
	idlePoll = 10 * time.Millisecond
)

// TB is the part of testing.TB that journeytest uses: *testing.T, *testing.B and *testing.F have
// it. As with testing.TB, Fatalf must not return: it ends the test, or panics.
type TB interface {
	Helper()
	Name() string
	Cleanup(func())
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Runtime is a journey.Runtime for one test, on a schema of its own, with a clock that the test
// moves. Its methods of journey.Runtime (Start, Set, Get, Summarize, ...) work as usual; its
// helpers fail the test, through its Fatalf, with a message that includes the execution's
// Summarize.
type Runtime struct {
	*journey.Runtime
	t     TB
	clock *clock.Stub
}

// New starts a runtime that serves graphs, on a fresh schema, for the test t. The schema is
// dropped and the runtime stopped when the test ends. The database is TEST_DATABASE_URL, or else
// a throwaway PostgreSQL cluster that the test binary starts at the first New and shares among its
// tests (see Main). Tests that call New may run in parallel.
//
// The runtime's clock is the test's: it stands still until Advance moves it. Its warnings and
// errors go to the test's log.
func New(t TB, graphs ...*graph.Graph) *Runtime {
	t.Helper()
	return NewWithConfig(t, journey.Config{Graphs: graphs})
}

// NewWithConfig is New with a Config of the test's own, for settings such as MaxWorkers,
// OnExecutionFailed or Logger. Leave DatabaseURL, Pool, Schema and Test zero: the test kit
// provides the database, the schema and the clock. PollInterval and SweepInterval default to this
// package's constants.
func NewWithConfig(t TB, cfg journey.Config) *Runtime {
	t.Helper()
	if cfg.DatabaseURL != "" || cfg.Pool != nil || cfg.Schema != "" || cfg.Test.Clock != nil {
		t.Fatalf("journeytest: leave Config.DatabaseURL, Pool, Schema and Test.Clock zero: " +
			"the test kit provides them (TEST_DATABASE_URL or a throwaway cluster, a fresh schema per test, and its clock)")
	}
	stub := clock.NewStub(time.Now().Truncate(time.Millisecond))
	cfg.DatabaseURL = pgtest.URL(t)
	cfg.Schema = pgtest.Schema(t) // dropped when the test ends, after the Stop below
	cfg.Test.Clock = stub
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollInterval)
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, SweepInterval)
	logs := &testLog{t: t}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	r := &Runtime{t: t, clock: stub}
	ctx, cancel, _ := r.waitContext()
	defer cancel()
	rt, err := journey.New(ctx, cfg)
	if err != nil {
		t.Fatalf("journeytest: starting the runtime: %v", err)
	}
	r.Runtime = rt
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := rt.Stop(ctx); err != nil {
			t.Errorf("journeytest: stopping the runtime: %v", err)
		}
		logs.close()
	})
	return r
}

// Main runs the tests of a package, as TestMain, and then stops the throwaway cluster that they
// started, if any:
//
//	func TestMain(m *testing.M) { journeytest.Main(m) }
//
// It is optional. Without it, the cluster stops when the test binary exits (the server dies with
// its parent), and leaves a temporary directory behind, which the next start removes.
func Main(m *testing.M) {
	pgtest.Main(m)
}

// Now returns the time by the test's clock. It stands still until Advance moves it. The runtime
// decides by it everywhere (due ticks, backoffs, deadlines, the times it records), and
// journey.Now(ctx) returns it in the functions of the runtime's graphs.
func (r *Runtime) Now() time.Time {
	return r.clock.Now()
}

// Advance moves the test's clock forward by d and returns the new time. What the move makes due
// happens at once, with no sleep: when Advance returns, the runtime has swept at the new time, so
// that the ticks that came due have fired, the retries whose backoff has passed are available and
// being claimed, and the attempts past their deadline are abandoned. Wait for what follows with
// WaitValue or WaitIdle.
//
// Time jumps: a computation running across the move gets no heartbeat during it, and a move past
// its heartbeat timeout (graph.Heartbeat, 30s by default) abandons it, as it would a frozen
// process. Wait for the execution to be idle first, unless that is what the test is about.
func (r *Runtime) Advance(d time.Duration) time.Time {
	r.t.Helper()
	if d < 0 {
		r.t.Fatalf("journeytest: Advance(%v): the clock only moves forward", d)
	}
	return r.clock.Advance(d)
}

// waitContext returns the context of one wait, and how long it lasts: DefaultTimeout, or nine
// tenths of the time left before the test's deadline if that is sooner.
func (r *Runtime) waitContext() (context.Context, context.CancelFunc, time.Duration) {
	patience := r.patience()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	return ctx, cancel, patience
}

func (r *Runtime) patience() time.Duration {
	d := DefaultTimeout
	if t, ok := r.t.(interface{ Deadline() (time.Time, bool) }); ok {
		if at, ok := t.Deadline(); ok {
			d = min(d, max(time.Until(at)*9/10, 0))
		}
	}
	return d
}

// testLog writes the runtime's log lines to the test's log, until the runtime has stopped: a
// test's log must not be written once the test is over.
type testLog struct {
	mu     sync.Mutex
	t      TB
	closed bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.t.Logf("%s", bytes.TrimSuffix(p, []byte("\n")))
	}
	return len(p), nil
}

func (l *testLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
}
