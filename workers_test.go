package journey_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// MaxWorkers bounds the functions running at once on a replica. An attempt whose function has
// returned frees its worker while its outcome is recorded, so that the next claims overlap the
// recording; but the attempts claimed and not yet returned never outnumber MaxWorkers.
func TestMaxWorkersBoundsTheFunctionsRunning(t *testing.T) {
	t.Parallel()
	const workers, executions = 2, 8
	var returned atomic.Int64
	entered := make(chan struct{}, executions)
	release := make(chan struct{})
	g := graph.MustNew("workers", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			defer returned.Add(1)
			entered <- struct{}{}
			select {
			case <-release:
				return in.Int("x"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}),
	})
	cfg := testConfig(t, g)
	cfg.MaxWorkers = workers
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	inputs := make([]map[string]any, executions)
	for i := range inputs {
		inputs[i] = map[string]any{"x": i}
	}
	started, err := rt.StartMany(ctx, g, inputs)
	require.NoError(t, err)

	// A claim commits its attempts RUNNING before their functions start: RUNNING attempts less
	// the functions returned is never below what the replica runs, whenever it is read.
	claimedNotReturned := func() int64 {
		var running int64
		require.NoError(t, pgtest.DB(t).QueryRowContext(ctx, "SELECT count(*) FROM "+
			pgx.Identifier{cfg.Schema, "computations"}.Sanitize()+" WHERE state = 'RUNNING'").Scan(&running))
		return running - returned.Load()
	}
	// Each function blocks until released; one released lets one more in, until all have run.
	for i := 0; i < executions; i++ {
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatalf("%d of %d functions ran", i, executions)
		}
		require.LessOrEqual(t, claimedNotReturned(), int64(workers), "attempts claimed whose functions have not returned")
		if i >= workers-1 {
			release <- struct{}{}
		}
	}
	for range workers - 1 {
		release <- struct{}{}
	}
	for i, e := range started {
		v, err := rt.Get(ctx, e.ID, "y", journey.WaitAny())
		require.NoError(t, err)
		require.Equal(t, int64(i), v.Int())
	}
}
