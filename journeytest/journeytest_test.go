package journeytest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/journeytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.Runner{M: m})
}

var errMailDown = errors.New("mail server down")

// A graph with a 1-hour tick, then a send that fails once and retries after a 10-minute backoff,
// runs to the end in test time, with no wait for either.
func TestAnHourAndABackoffTakeNoWallTime(t *testing.T) {
	t.Parallel()
	var sends atomic.Int64
	g := graph.MustNew("reminder_retry", "v1", []graph.Node{
		graph.Input("email"),
		graph.TickOnce("in_an_hour", graph.Needs("email"),
			func(ctx context.Context, in graph.Values) (time.Time, error) {
				return journey.Now(ctx).Add(time.Hour), nil
			}),
		graph.Compute("send", graph.Needs("email", "in_an_hour"),
			func(ctx context.Context, in graph.Values) (any, error) {
				if sends.Add(1) == 1 {
					return nil, errMailDown
				}
				return "sent to " + in.String("email"), nil
			},
			graph.Backoff(func(int) time.Duration { return 10 * time.Minute })),
	})
	began := time.Now()
	rt := journeytest.New(t, g)
	started := time.Now()
	ex, err := rt.Start(t.Context(), g, journey.WithValues(map[string]any{"email": "mario@example.com"}))
	require.NoError(t, err)

	rt.WaitIdle(ex.ID)
	require.Zero(t, sends.Load(), "nothing is sent before the hour has passed")
	rt.Advance(time.Hour)
	rt.WaitIdle(ex.ID) // the first send failed; the retry waits for its backoff
	require.Equal(t, int64(1), sends.Load())
	failedAt := rt.Now()
	rt.Advance(10 * time.Minute)
	rt.RequireValue(ex.ID, "send", "sent to mario@example.com")
	finished := time.Now()

	comps, err := rt.Computations(t.Context(), ex.ID)
	require.NoError(t, err)
	var send []journey.Computation
	for _, c := range comps {
		if c.Node == "send" {
			send = append(send, c)
		}
	}
	require.Len(t, send, 2)
	require.Equal(t, journey.StateFailed, send[0].State)
	require.Equal(t, errMailDown.Error(), send[0].Error)
	require.Equal(t, journey.StateSuccess, send[1].State)
	require.WithinDuration(t, failedAt.Add(10*time.Minute), send[1].RunAt, time.Millisecond, "the retry ran after its backoff, by the test's clock")

	elapsed := finished.Sub(started)
	t.Logf("an hour's tick and a 10-minute backoff took %v of wall time (%v with the runtime's start)",
		elapsed.Round(time.Millisecond), finished.Sub(began).Round(time.Millisecond))
	require.Less(t, elapsed, 10*time.Second, "a guard only: it takes well under a second")
}

// Advance past AbandonAfter abandons a computation that hangs, at once.
func TestAdvancePastADeadline(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	g := graph.MustNew("hangs", "v1", []graph.Node{
		graph.Input("go"),
		graph.Compute("slow", graph.Needs("go"),
			func(ctx context.Context, in graph.Values) (any, error) {
				select {
				case started <- struct{}{}:
				default:
				}
				<-ctx.Done() // hangs until the runtime gives up on it
				return nil, ctx.Err()
			},
			graph.AbandonAfter(time.Minute), graph.MaxAttempts(1), graph.Heartbeat(50*time.Millisecond, time.Second)),
	})
	rt := journeytest.New(t, g)
	ex, err := rt.Start(t.Context(), g, journey.WithValues(map[string]any{"go": true}))
	require.NoError(t, err)
	waitStarted(t, started, "slow")
	rt.Advance(time.Minute)
	rt.RequireFailed(ex.ID, "slow", errors.New("abandoned: deadline passed"))
	comps, err := rt.Computations(t.Context(), ex.ID)
	require.NoError(t, err)
	require.Len(t, comps, 1)
	require.Equal(t, journey.StateAbandoned, comps[0].State)
}

// journey.Now(ctx) in a graph's function is the test's clock.
func TestNowInAFunctionIsTheTestClock(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("now", "v1", []graph.Node{
		graph.Input("go"),
		graph.Compute("at", graph.Needs("go"), func(ctx context.Context, in graph.Values) (any, error) {
			return journey.Now(ctx), nil
		}),
	})
	rt := journeytest.New(t, g)
	at := rt.Advance(72 * time.Hour)
	require.Equal(t, at, rt.Now())
	ex, err := rt.Start(t.Context(), g, journey.WithValues(map[string]any{"go": true}))
	require.NoError(t, err)
	rt.RequireValue(ex.ID, "at", at)
	v := rt.WaitValue(ex.ID, "at")
	require.Equal(t, at, v.SetAt.UTC(), "the runtime records times by the test's clock")
}

func TestRequireValueComparesAsJSON(t *testing.T) {
	t.Parallel()
	type order struct {
		Item  string `json:"item"`
		Count int    `json:"count"`
	}
	g := graph.MustNew("json", "v1", []graph.Node{
		graph.Input("order"),
		graph.Compute("total", graph.Needs("order"), func(ctx context.Context, in graph.Values) (any, error) {
			var o order
			if err := in.Decode("order", &o); err != nil {
				return nil, err
			}
			return map[string]any{"count": o.Count, "price": 2.5 * float64(o.Count), "item": o.Item}, nil
		}),
	})
	rt := journeytest.New(t, g)
	ex, err := rt.Start(t.Context(), g, journey.WithValues(map[string]any{"order": order{"tea", 2}}))
	require.NoError(t, err)
	rt.RequireValue(ex.ID, "total", map[string]any{"item": "tea", "price": 5, "count": 2.0})
	rt.RequireValue(ex.ID, "order", order{"tea", 2})
	rt.RequireValue(ex.ID, "order", map[string]any{"count": 2, "item": "tea"})

	// RequireValue waits for a recomputation to settle.
	_, err = rt.Set(t.Context(), ex.ID, "order", order{"tea", 3})
	require.NoError(t, err)
	rt.RequireValue(ex.ID, "total", map[string]any{"item": "tea", "price": 7.5, "count": 3})
}

// recorder is a journeytest.TB that records the message of Fatalf instead of failing the test,
// and ends the goroutine, as testing.T does. Its Deadline, when set, bounds the helpers' waits.
type recorder struct {
	*testing.T
	mu       sync.Mutex
	deadline time.Time
	fatal    string
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatal = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Deadline() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deadline, !r.deadline.IsZero()
}

// fails runs fn in a goroutine of its own, as a test runs, with waits bounded by patience, and
// returns the message fn failed with; it fails the test if fn did not fail.
func (r *recorder) fails(patience time.Duration, fn func()) string {
	r.Helper()
	r.mu.Lock()
	r.fatal, r.deadline = "", time.Now().Add(patience)
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deadline = time.Time{}
	require.NotEmpty(r.T, r.fatal, "the helper did not fail")
	return r.fatal
}

func TestFailureMessages(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	stuck := make(chan struct{}, 1) // the stuck function says it started
	g := graph.MustNew("messages", "v1", []graph.Node{
		graph.Input("name"),
		graph.Input("email"),
		graph.Compute("greeting", graph.Needs("name", "email"),
			func(ctx context.Context, in graph.Values) (any, error) {
				return "Welcome, " + in.String("name"), nil
			}),
		graph.Compute("charge", graph.Needs("name"),
			func(ctx context.Context, in graph.Values) (any, error) {
				return nil, graph.Permanent(errors.New("card declined"))
			}),
		graph.Compute("send", graph.Needs("name"),
			func(ctx context.Context, in graph.Values) (any, error) {
				return nil, errMailDown
			},
			graph.Backoff(func(int) time.Duration { return 10 * time.Minute })),
		graph.Input("go"),
		graph.Compute("stuck", graph.Needs("go"),
			func(ctx context.Context, in graph.Values) (any, error) {
				select {
				case stuck <- struct{}{}:
				default:
				}
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil, ctx.Err()
			}),
	})
	rec := &recorder{T: t}
	rt := journeytest.New(rec, g)
	t.Cleanup(func() { close(release) }) // before the runtime stops
	ctx := t.Context()
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"name": "Mario"}))
	require.NoError(t, err)
	rt.WaitIdle(ex.ID)

	// Each message says what is wrong, and shows the execution.
	summary := fmt.Sprintf("Execution %s of graph \"messages\" version \"v1\"", ex.ID)
	for _, tc := range []struct {
		name string
		fn   func()
		want []string
	}{
		{"WaitValue with no value", func() { rt.WaitValue(ex.ID, "greeting") },
			[]string{fmt.Sprintf(`journeytest: node "greeting" of execution %s has no value after `, ex.ID),
				`greeting: needs "email"`}},
		{"WaitValue of a failed node", func() { rt.WaitValue(ex.ID, "charge") },
			[]string{`node "charge" of execution ` + ex.ID + ` failed instead of getting a value`, "card declined"}},
		{"RequireValue of another value", func() { rt.RequireValue(ex.ID, "name", "Luigi") },
			[]string{`node "name" of execution ` + ex.ID + ` is "Mario" (revision 1), want "Luigi"`}},
		{"RequireValue with no value", func() { rt.RequireValue(ex.ID, "greeting", "Welcome, Mario") },
			[]string{`node "greeting" of execution ` + ex.ID + ` has no value, want "Welcome, Mario"`}},
		{"RequireValue of an unencodable want", func() { rt.RequireValue(ex.ID, "name", func() {}) },
			[]string{"journeytest: RequireValue: want (func()) is not JSON-encodable"}},
		{"RequireFailed of a node with a value", func() { rt.RequireFailed(ex.ID, "name", nil) },
			[]string{`node "name" of execution ` + ex.ID + ` did not fail: it is "Mario" (revision 1)`}},
		{"RequireFailed with another error", func() { rt.RequireFailed(ex.ID, "charge", errMailDown) },
			[]string{`node "charge" of execution ` + ex.ID + ` failed with an error that does not match "mail server down"`, "card declined"}},
		{"RequireFailed of a retry waiting for the clock", func() { rt.RequireFailed(ex.ID, "send", errMailDown) },
			[]string{`node "send" of execution ` + ex.ID + ` did not fail, and has no value`,
				"send attempt 2 is due in 10m0s: Advance moves the clock"}},
		{"Advance backwards", func() { rt.Advance(-time.Second) },
			[]string{"journeytest: Advance(-1s): the clock only moves forward"}},
	} {
		msg := rec.fails(time.Second, tc.fn)
		t.Logf("%s:\n%s", tc.name, msg)
		for _, want := range tc.want {
			require.Contains(t, msg, want, tc.name)
		}
		if tc.name != "Advance backwards" && tc.name != "RequireValue of an unencodable want" {
			require.Contains(t, msg, summary, "%s: the message shows the execution", tc.name)
		}
	}
	// RequireFailed passes with the error the node failed with, or part of its text.
	rt.RequireFailed(ex.ID, "charge", errors.New("card declined"))
	rt.RequireFailed(ex.ID, "charge", journey.ErrComputationFailed)
	rt.RequireFailed(ex.ID, "charge", nil)

	// A running computation keeps the execution busy.
	_, err = rt.Set(ctx, ex.ID, "go", true)
	require.NoError(t, err)
	waitStarted(t, stuck, "stuck")
	msg := rec.fails(time.Second, func() { rt.WaitIdle(ex.ID) })
	t.Logf("WaitIdle of a busy execution:\n%s", msg)
	require.Contains(t, msg, fmt.Sprintf("journeytest: execution %s is still busy after ", ex.ID))
	require.Contains(t, msg, "stuck attempt 1 is RUNNING")
	require.Contains(t, msg, summary)
}

func TestNewWithConfigRefusesADatabase(t *testing.T) {
	t.Parallel()
	rec := &recorder{T: t}
	msg := rec.fails(time.Second, func() {
		journeytest.NewWithConfig(rec, journey.Config{DatabaseURL: "postgres://elsewhere/db", Graphs: []*graph.Graph{reminder}})
	})
	require.Contains(t, msg, "journeytest: leave Config.DatabaseURL, Pool, Schema and Test.Clock zero")
}

// Tests that run in parallel get runtimes of their own, on schemas of their own, with clocks of
// their own.
func TestParallel(t *testing.T) {
	t.Parallel()
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			rt := journeytest.New(t, reminder)
			email := fmt.Sprintf("user%d@example.com", i)
			ex, err := rt.Start(t.Context(), reminder, journey.WithValues(map[string]any{"email": email}))
			require.NoError(t, err)
			rt.WaitIdle(ex.ID)
			rt.Advance(time.Duration(i+1) * time.Hour)
			rt.RequireValue(ex.ID, "reminder", "Reminder sent to "+email)
			n, err := rt.Count(t.Context(), journey.ListQuery{})
			require.NoError(t, err)
			require.Equal(t, int64(1), n, "each test sees its own executions only")
		})
	}
}

// waitStarted waits until the function of node says it started: its attempt is running.
func waitStarted(t *testing.T, started <-chan struct{}, node string) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(journeytest.DefaultTimeout):
		t.Fatalf("%s did not start within %v", node, journeytest.DefaultTimeout)
	}
}

// A compensation gated on graph.Failed runs when its node fails for good, with the failure in its
// values, and retries as any node does; journeytest requires both. A Retry that succeeds clears
// the compensation's value, as a gate that stops holding does.
func TestACompensationRunsOnFailure(t *testing.T) {
	t.Parallel()
	var declined, restocks atomic.Int64
	declined.Store(1)
	g := graph.MustNew("compensated", "v1", []graph.Node{
		graph.Input("amount"),
		graph.Compute("charge", graph.Needs("amount"), func(ctx context.Context, in graph.Values) (any, error) {
			if declined.Load() == 1 {
				return nil, graph.Permanent(errors.New("card declined"))
			}
			return "charged", nil
		}),
		graph.Compute("restock", graph.Failed("charge"), func(ctx context.Context, in graph.Values) (any, error) {
			if restocks.Add(1) == 1 {
				return nil, errors.New("warehouse busy") // retried
			}
			return "restocked after: " + in["charge"].Error, nil
		}, graph.Backoff(func(int) time.Duration { return time.Minute })),
	})
	rt := journeytest.New(t, g)
	ex, err := rt.Start(t.Context(), g, journey.WithValues(map[string]any{"amount": 10}))
	require.NoError(t, err)
	rt.WaitIdle(ex.ID)
	rt.Advance(time.Minute)
	rt.RequireFailed(ex.ID, "charge", errors.New("card declined"))
	rt.RequireValue(ex.ID, "restock", "restocked after: card declined")
	require.Equal(t, int64(2), restocks.Load())

	declined.Store(0)
	require.NoError(t, rt.Retry(t.Context(), ex.ID, "charge"))
	rt.RequireValue(ex.ID, "charge", "charged")
	_, err = rt.Get(t.Context(), ex.ID, "restock")
	require.ErrorIs(t, err, journey.ErrNotSet, "the gate no longer holds: the compensation's value is cleared")
	require.Equal(t, int64(2), restocks.Load())
}
