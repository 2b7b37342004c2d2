package journey_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

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

// A paused graph version: its waiting attempts wait PAUSED, and so do those its Starts make; the
// other graphs run on; ResumeGraph runs what waits, a retry keeping its backoff.
func TestPauseGraphHoldsItsWorkOnly(t *testing.T) {
	t.Parallel()
	var runs, fails atomic.Int64
	nodes := func() []graph.Node {
		return []graph.Node{
			graph.Input("x"),
			graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
				runs.Add(1)
				return "y", nil
			}),
		}
	}
	held := graph.MustNew("held", "v1", append(nodes(), graph.Compute("z", graph.Needs("x"),
		func(ctx context.Context, in graph.Values) (any, error) {
			fails.Add(1)
			return nil, errors.New("later")
		}, graph.Backoff(func(int) time.Duration { return time.Hour }))))
	other := graph.MustNew("other", "v1", nodes())
	rt := newRuntime(t, testConfig(t, held, other))
	ctx := testCtx(t)

	before, err := rt.Start(ctx, held, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	_, err = rt.Get(ctx, before.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	stateOf := func(id, node string) journey.ComputationState {
		comps, err := rt.Computations(ctx, id)
		require.NoError(t, err)
		state := journey.ComputationState("")
		for _, c := range comps {
			if c.Node == node {
				state = c.State
			}
		}
		return state
	}
	require.Eventually(t, func() bool { return stateOf(before.ID, "z") == journey.StatePending }, 10*time.Second, 10*time.Millisecond,
		"z failed, and its retry waits an hour")

	require.NoError(t, rt.PauseGraph(ctx, "held", "v1"))
	require.NoError(t, rt.PauseGraph(ctx, "held", "v1"), "idempotent")
	require.Equal(t, journey.StatePaused, stateOf(before.ID, "z"), "the waiting retry is paused")
	during, err := rt.Start(ctx, held, journey.WithValues(map[string]any{"x": 2}))
	require.NoError(t, err)
	running, err := rt.Start(ctx, other, journey.WithValues(map[string]any{"x": 3}))
	require.NoError(t, err)
	_, err = rt.Get(ctx, running.ID, "y", journey.WaitAny())
	require.NoError(t, err, "the other graph runs")
	require.Equal(t, journey.StatePaused, stateOf(during.ID, "y"), "a Start of the paused version waits")
	require.EqualValues(t, 2, runs.Load())

	require.NoError(t, rt.ResumeGraph(ctx, "held", "v1"))
	_, err = rt.Get(ctx, during.ID, "y", journey.WaitAny())
	require.NoError(t, err, "what waited runs")
	require.Equal(t, journey.StatePending, stateOf(before.ID, "z"), "the retry waits for its backoff again")
	require.EqualValues(t, 2, fails.Load(), "z ran twice: the first attempt of each execution, no retry")
	require.ErrorIs(t, rt.PauseGraph(ctx, "nope", "v1"), journey.ErrUnknownGraph)
}
