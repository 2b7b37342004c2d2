package journey_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
)

// A queue of ready work is claimed by priority, each point worth graph.PriorityStep of waiting:
// a higher priority goes first among attempts that became ready close together, equal
// priorities keep their order, and an attempt that has waited longer than the difference of
// priorities is worth goes first whatever its priority, so that nothing starves.
func TestPriorityOrdersTheQueueWithoutStarving(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var order []string
	g := graph.MustNew("prio", "v1", []graph.Node{
		graph.Input("name"),
		graph.Compute("work", graph.Needs("name"), func(ctx context.Context, in graph.Values) (any, error) {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, in.String("name"))
			return nil, nil
		}, graph.Priority(2)), // adds to every execution's, and changes no order
	})
	stub := clock.NewStub(time.Now().Truncate(time.Millisecond))
	cfg := testConfig(t, g)
	cfg.Test.Clock, cfg.MaxWorkers = stub, 1
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)

	// The queue is built while the graph is paused, and claimed one attempt at a time once it
	// resumes, which keeps each attempt's place.
	require.NoError(t, rt.PauseGraph(ctx, "prio", "v1"))
	start := func(name string, p int) {
		t.Helper()
		ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"name": name}), journey.WithPriority(p))
		require.NoError(t, err)
		require.Equal(t, p, ex.Priority)
	}
	start("low", 0)               // queued at t0
	start("low-after", 0)         // t0 too, made after low: equal priorities keep their order
	stub.Advance(9 * time.Minute) // t0+9m
	start("urgent-soon", 10)      // t0+9m-10m: ahead of what waited nine minutes
	stub.Advance(2 * time.Minute) // t0+11m
	start("urgent-late", 10)      // t0+1m: behind what waited more than ten minutes
	start("mid", 5)               // t0+6m
	start("none", 0)              // t0+11m

	require.NoError(t, rt.ResumeGraph(ctx, "prio", "v1"))
	want := []string{"urgent-soon", "low", "low-after", "urgent-late", "mid", "none"}
	waitFor(t, "every attempt to run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == len(want)
	})
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, want, order)
}

func TestPriorityOutOfRangeIsRefused(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("prio-range", "v1", []graph.Node{graph.Input("x")})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	for _, p := range []int{-1, graph.MaxPriority + 1} {
		_, err := rt.Start(ctx, g, journey.WithPriority(p))
		require.ErrorIs(t, err, journey.ErrInvalidValue)
		require.ErrorContains(t, err, "must be from 0 to 100")
	}
	_, err := rt.StartMany(ctx, g, []map[string]any{nil, nil}, journey.WithPriorities([]int{3, 101}))
	require.ErrorIs(t, err, journey.ErrInvalidValue)
	require.ErrorContains(t, err, "inputs[1]: journey: invalid value: priority 101 must be from 0 to 100")
	list, err := rt.List(ctx, journey.ListQuery{Graph: "prio-range"})
	require.NoError(t, err)
	require.Empty(t, list, "nothing was started")

	_, err = graph.New("bad", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(context.Context, graph.Values) (any, error) { return nil, nil }, graph.Priority(101)),
	})
	require.ErrorContains(t, err, `option Priority(101) must be from 0 to 100`)
}
