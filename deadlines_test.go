package journey_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/actors"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
	"github.com/journey-go/journey/persistence"
)

// outcomes collects the ComputationFinished hook's reports.
type outcomes struct {
	mu  sync.Mutex
	got map[int]string // attempt → outcome
	ch  chan struct{}
}

func newOutcomes() *outcomes { return &outcomes{got: map[int]string{}, ch: make(chan struct{}, 100)} }

func (o *outcomes) hook(c *persistence.Computation, outcome string) {
	o.mu.Lock()
	o.got[c.Attempt] = outcome
	o.mu.Unlock()
	o.ch <- struct{}{}
}

// wait waits for the outcome of an attempt.
func (o *outcomes) wait(t *testing.T, attempt int) string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		o.mu.Lock()
		out, ok := o.got[attempt]
		o.mu.Unlock()
		if ok {
			return out
		}
		select {
		case <-o.ch:
		case <-timeout:
			t.Fatalf("attempt %d never finished", attempt)
		}
	}
}

func TestHeartbeatKeepsLongWorkAlive(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	fn := newBlocking()
	g := graph.MustNew("long", "v1", []graph.Node{
		graph.Input("go"),
		graph.Compute("slow", graph.Needs("go"), fn.fn, graph.Heartbeat(timeout/4, timeout), graph.AbandonAfter(30*time.Second)),
	})
	// Whole milliseconds, so that the times read back from the database compare equal.
	stub := clock.NewStub(time.Now().Truncate(time.Millisecond))
	cfg := testConfig(t, g)
	cfg.Test.Clock = stub
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "go", true)
	require.NoError(t, err)
	require.Equal(t, 1, fn.waitStarted(t))

	// The work outlives its heartbeat timeout 5×. Each step moves the clock by half the timeout and
	// waits for a heartbeat written at the new time: without it, the second step would put the
	// attempt past its heartbeat deadline, and the sweeper would abandon it.
	for step := 1; step <= 10; step++ {
		now := stub.Advance(timeout / 2)
		waitFor(t, fmt.Sprintf("a heartbeat at step %d", step), func() bool {
			got := attempts(t, rt, ex.ID, "slow")
			require.Len(t, got, 1, "step %d: the attempt was not abandoned", step)
			require.Equal(t, journey.StateRunning, got[0].State, "step %d", step)
			return got[0].LastHeartbeatAt != nil && !got[0].LastHeartbeatAt.Before(now)
		})
	}
	close(fn.release)
	v, err := rt.Get(ctx, ex.ID, "slow", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, "late", v.String())
	got := attempts(t, rt, ex.ID, "slow")
	require.Len(t, got, 1, "finished with one attempt")
	require.Equal(t, journey.StateSuccess, got[0].State)
	require.Equal(t, int64(1), fn.calls.Load())
	require.GreaterOrEqual(t, got[0].LastHeartbeatAt.Sub(*got[0].ClaimedAt), 5*timeout, "the heartbeat advanced")
}

// blocking is a compute function that hangs, ignoring its context, until released: a function
// stuck in a call that does not honour cancellation.
type blocking struct {
	calls   atomic.Int64
	started chan int
	release chan struct{}
	fast    func(attempt int) bool // attempts that return at once
}

func newBlocking() *blocking {
	return &blocking{started: make(chan int, 10), release: make(chan struct{})}
}

func (b *blocking) fn(ctx context.Context, in graph.Values) (any, error) {
	attempt := int(b.calls.Add(1))
	if b.fast != nil && b.fast(attempt) {
		return "fresh", nil
	}
	b.started <- attempt
	<-b.release
	return "late", nil
}

func (b *blocking) waitStarted(t *testing.T) int {
	t.Helper()
	select {
	case a := <-b.started:
		return a
	case <-time.After(20 * time.Second):
		t.Fatal("the computation never started")
		return 0
	}
}

func TestHardDeadlineAbandonsAndFences(t *testing.T) {
	t.Parallel()
	fn := newBlocking()
	g := graph.MustNew("hung", "v1", []graph.Node{
		graph.Input("go"),
		graph.Compute("slow", graph.Needs("go"), fn.fn,
			graph.AbandonAfter(300*time.Millisecond), graph.Heartbeat(50*time.Millisecond, 10*time.Second),
			graph.MaxAttempts(2), graph.Backoff(fastBackoff)),
	})
	stub := clock.NewStub(time.Now())
	done := newOutcomes()
	cfg := testConfig(t, g)
	cfg.Test.Clock = stub
	cfg.Test.Hooks = actors.Hooks{ComputationFinished: done.hook}
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "go", true)
	require.NoError(t, err)

	for attempt := 1; attempt <= 2; attempt++ {
		require.Equal(t, attempt, fn.waitStarted(t))
		stub.Advance(time.Second) // past AbandonAfter, well within the heartbeat timeout
		waitFor(t, "the attempt to be abandoned", func() bool {
			return countStates(t, rt, ex.ID, "slow")[journey.StateAbandoned] == attempt
		})
	}
	_, err = rt.Get(ctx, ex.ID, "slow", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)
	require.Contains(t, err.Error(), persistence.ReasonDeadline)

	close(fn.release) // the hung functions return at last: their results must be dropped
	require.Equal(t, actors.OutcomeDropped, done.wait(t, 1))
	require.Equal(t, actors.OutcomeDropped, done.wait(t, 2))
	_, err = rt.Get(ctx, ex.ID, "slow")
	require.ErrorIs(t, err, journey.ErrComputationFailed, "the late results were not written")
	got := attempts(t, rt, ex.ID, "slow")
	require.Len(t, got, 2)
	for _, c := range got {
		require.Equal(t, journey.StateAbandoned, c.State)
		require.Equal(t, persistence.ReasonDeadline, c.Error)
		require.NotEmpty(t, c.ReplicaID)
	}
}

func TestHeartbeatDeadlineCatchesAFrozenWorker(t *testing.T) {
	t.Parallel()
	const abandonAfter = time.Minute
	fn := newBlocking()
	fn.fast = func(attempt int) bool { return attempt > 1 }
	g := graph.MustNew("frozen", "v1", []graph.Node{
		graph.Input("go"),
		graph.Compute("work", graph.Needs("go"), fn.fn,
			graph.AbandonAfter(abandonAfter), graph.Heartbeat(50*time.Millisecond, 250*time.Millisecond),
			graph.MaxAttempts(2), graph.Backoff(fastBackoff)),
	})
	done := newOutcomes()
	stub := clock.NewStub(time.Now())
	cfg := testConfig(t, g)
	cfg.Test.Clock = stub
	cfg.Test.Hooks = actors.Hooks{
		// The first attempt's watchdog writes nothing, as if its process had frozen.
		SuppressHeartbeat:   func(c *persistence.Computation) bool { return c.Attempt == 1 },
		ComputationFinished: done.hook,
	}
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "go", true)
	require.NoError(t, err)

	require.Equal(t, 1, fn.waitStarted(t))
	// Past the heartbeat timeout, far from AbandonAfter. The clock stays there, so the second
	// attempt, which heartbeats, is never past its deadlines, however slowly it runs.
	stub.Advance(time.Second)
	v, err := rt.Get(ctx, ex.ID, "work", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, "fresh", v.String(), "the second attempt's value")

	got := attempts(t, rt, ex.ID, "work")
	require.Len(t, got, 2)
	require.Equal(t, journey.StateAbandoned, got[0].State)
	require.Equal(t, persistence.ReasonHeartbeat, got[0].Error)
	require.Less(t, got[0].FinishedAt.Sub(*got[0].ClaimedAt), abandonAfter/4, "abandoned well before AbandonAfter")
	require.Equal(t, journey.StateSuccess, got[1].State)

	close(fn.release)
	require.Equal(t, actors.OutcomeDropped, done.wait(t, 1), "the frozen attempt's late result is dropped")
	after, err := rt.Get(ctx, ex.ID, "work")
	require.NoError(t, err)
	require.Equal(t, "fresh", after.String())
	require.Equal(t, v.Revision, after.Revision)
}

func TestTwoReplicasShareOneSchema(t *testing.T) {
	t.Parallel()
	const n = 200
	var calls sync.Map // execution id → *atomic.Int64
	g := graph.MustNew("shared", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			c, _ := calls.LoadOrStore(in.String("x"), new(atomic.Int64))
			c.(*atomic.Int64).Add(1)
			return "y-" + in.String("x"), nil
		}),
	})
	cfg := testConfig(t, g)
	cfg.MaxWorkers = 20
	a := newRuntime(t, cfg)
	cfg.ReplicaID = "second"
	b := newRuntime(t, cfg)
	ctx := testCtx(t)

	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		rt := []*journey.Runtime{a, b}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			ex, err := rt.Start(ctx, g)
			if err != nil {
				errs <- err
				return
			}
			ids[i] = ex.ID
			if _, err := rt.Set(ctx, ex.ID, "x", ex.ID); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	replicas := map[string]int{}
	for i, id := range ids {
		v, err := []*journey.Runtime{b, a}[i%2].Get(ctx, id, "y", journey.WaitAny())
		require.NoError(t, err)
		require.Equal(t, "y-"+id, v.String())
		got := attempts(t, a, id, "y")
		require.Len(t, got, 1)
		replicas[got[0].ReplicaID]++
	}
	for _, id := range ids {
		c, ok := calls.Load(id)
		require.True(t, ok)
		require.Equal(t, int64(1), c.(*atomic.Int64).Load(), "each compute function runs exactly once")
	}
	t.Logf("computations per replica: %v", replicas)
}
