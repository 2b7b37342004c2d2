package journey_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// While an execution is paused its running attempt finishes, and what that makes ready waits
// PAUSED, unclaimed; Resume runs it. The list shows the execution paused.
func TestPauseHoldsWhatComesReadyUntilResume(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}, 1), make(chan struct{})
	var ran atomic.Int64
	g := graph.MustNew("pause", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("a", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			started <- struct{}{}
			<-release
			return "a", nil
		}),
		graph.Compute("b", graph.Needs("a"), func(ctx context.Context, in graph.Values) (any, error) {
			ran.Add(1)
			return "b", nil
		}),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	<-started
	require.NoError(t, rt.Pause(ctx, ex.ID))
	require.NoError(t, rt.Pause(ctx, ex.ID), "idempotent")
	close(release)
	_, err = rt.Get(ctx, ex.ID, "a", journey.WaitAny())
	require.NoError(t, err, "the running attempt finishes")

	comps, err := rt.Computations(ctx, ex.ID)
	require.NoError(t, err)
	require.Len(t, comps, 2)
	require.Equal(t, "b", comps[1].Node)
	require.Equal(t, journey.StatePaused, comps[1].State, "what it made ready waits")
	require.Zero(t, ran.Load())
	loaded, err := rt.Load(ctx, ex.ID)
	require.NoError(t, err)
	require.NotNil(t, loaded.PausedAt)
	paused, err := rt.List(ctx, journey.ListQuery{Graph: "pause", State: "paused"})
	require.NoError(t, err)
	require.Len(t, paused, 1)

	require.NoError(t, rt.Resume(ctx, ex.ID))
	v, err := rt.Get(ctx, ex.ID, "b", journey.WaitAny())
	require.NoError(t, err)
	require.JSONEq(t, `"b"`, string(v.Raw))
	require.EqualValues(t, 1, ran.Load())
	loaded, err = rt.Load(ctx, ex.ID)
	require.NoError(t, err)
	require.Nil(t, loaded.PausedAt)
}
