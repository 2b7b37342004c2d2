package journey_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// A function knows its execution, node and attempt, and its idempotency key is the same on each
// attempt of one computation, and another when the node is computed for new upstream values.
func TestAFunctionKnowsWhoItIs(t *testing.T) {
	t.Parallel()
	type call struct {
		id, node, key string
		attempt       int
	}
	var mu sync.Mutex
	var calls []call
	g := graph.MustNew("whoami", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			mu.Lock()
			calls = append(calls, call{journey.ExecutionID(ctx), journey.NodeName(ctx), journey.IdempotencyKey(ctx), journey.Attempt(ctx)})
			mu.Unlock()
			if journey.Attempt(ctx) == 1 {
				return nil, errors.New("the first attempt fails")
			}
			return in.Int("x"), nil
		}, graph.MaxAttempts(3), graph.Backoff(func(int) time.Duration { return time.Millisecond })),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	_, err = rt.Get(ctx, ex.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	rev, err := rt.Set(ctx, ex.ID, "x", 2)
	require.NoError(t, err)
	_, err = rt.Get(ctx, ex.ID, "y", journey.WaitNewerThan(rev))
	require.NoError(t, err)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, calls, 4, "two attempts for each value of x")
	for i, c := range calls {
		require.Equal(t, ex.ID, c.id)
		require.Equal(t, "y", c.node)
		require.Equal(t, i%2+1, c.attempt)
		require.NotEmpty(t, c.key)
	}
	require.Equal(t, calls[0].key, calls[1].key, "the retry keeps the key")
	require.Equal(t, calls[2].key, calls[3].key)
	require.NotEqual(t, calls[0].key, calls[2].key, "new upstream values make a new key")
	require.Empty(t, journey.ExecutionID(ctx), "outside a function")
	require.Empty(t, journey.IdempotencyKey(ctx))
	require.Zero(t, journey.Attempt(ctx))
}
