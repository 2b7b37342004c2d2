package journey_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// Cancel stops an execution for good: its running attempt's context is canceled by the NOTIFY
// (its heartbeat is an hour away), its attempt ends CANCELED and frees its concurrency slot for
// another execution; the canceled event fires once, with the reason and the runtime; nothing new
// is made or retried; a waiting Get ends; the key stays held until the execution is archived.
func TestCancelStopsAnExecutionForGood(t *testing.T) {
	t.Parallel()
	started := make(chan string, 4)
	stopped := make(chan string, 4)
	g := graph.MustNew("cancel", "v1", []graph.Node{
		graph.Input("order"),
		graph.Input("note"),
		graph.Compute("charge", graph.Needs("order"), func(ctx context.Context, in graph.Values) (any, error) {
			started <- in.String("order")
			<-ctx.Done()
			stopped <- in.String("order")
			return nil, ctx.Err()
		}, graph.Heartbeat(30*time.Minute, time.Hour),
			graph.ConcurrencyKey(func(graph.Values) string { return "one at a time" })),
		graph.Compute("noted", graph.Needs("note"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.String("note"), nil
		}),
	})
	cfg := testConfig(t, g)
	canceled := make(chan journey.ExecutionEvent, 2)
	cfg.OnExecutionCanceled = func(ctx context.Context, e journey.ExecutionEvent) error {
		canceled <- e
		return nil
	}
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)

	a, err := rt.Start(ctx, g, journey.WithKey("order-1"), journey.WithValues(map[string]any{"order": "a"}))
	require.NoError(t, err)
	require.Equal(t, "a", <-started)
	b, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"order": "b"}))
	require.NoError(t, err)
	waiting := make(chan error, 1)
	go func() {
		_, err := rt.Get(ctx, a.ID, "charge", journey.WaitAny())
		waiting <- err
	}()

	require.NoError(t, rt.Cancel(ctx, a.ID, "customer cancelled"))
	require.Equal(t, "a", <-stopped, "the running attempt's context is canceled")
	require.Equal(t, "b", <-started, "its concurrency slot is free")
	require.ErrorIs(t, <-waiting, journey.ErrCanceled)
	e := <-canceled
	require.Equal(t, journey.EventExecutionCanceled, e.Type)
	require.Equal(t, a.ID, e.ExecutionID)
	require.Equal(t, "customer cancelled", e.Reason)
	require.Same(t, rt, e.Runtime)

	comps, err := rt.Computations(ctx, a.ID)
	require.NoError(t, err)
	require.Len(t, comps, 1)
	require.Equal(t, journey.StateCanceled, comps[0].State)
	require.Equal(t, "canceled: customer cancelled", comps[0].Error)
	ex, err := rt.Load(ctx, a.ID)
	require.NoError(t, err)
	require.NotNil(t, ex.CanceledAt)
	require.Equal(t, "customer cancelled", ex.CancelReason)

	// Idempotent; nothing new runs; Retry is refused.
	require.NoError(t, rt.Cancel(ctx, a.ID, "again"))
	_, err = rt.Set(ctx, a.ID, "note", "too late")
	require.NoError(t, err)
	v, err := rt.Get(ctx, a.ID, "note")
	require.NoError(t, err)
	require.JSONEq(t, `"too late"`, string(v.Raw), "a Set records its value")
	comps, err = rt.Computations(ctx, a.ID)
	require.NoError(t, err)
	require.Len(t, comps, 1, "and nothing runs of it")
	require.ErrorIs(t, rt.Retry(ctx, a.ID, "charge"), journey.ErrCanceled)
	ex, err = rt.Load(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, "customer cancelled", ex.CancelReason, "the first cancel's reason stays")

	// The key stays held until the execution is archived.
	again, err := rt.Start(ctx, g, journey.WithKey("order-1"))
	require.NoError(t, err)
	require.True(t, again.Existing)
	require.Equal(t, a.ID, again.ID)
	require.NoError(t, rt.Archive(ctx, a.ID))
	fresh, err := rt.Start(ctx, g, journey.WithKey("order-1"))
	require.NoError(t, err)
	require.NotEqual(t, a.ID, fresh.ID)

	require.NoError(t, rt.Cancel(ctx, b.ID, "done"))
	require.Equal(t, "b", <-stopped)
	notes, err := rt.Notifications(ctx, a.ID)
	require.NoError(t, err)
	require.Len(t, notes, 1, "the canceled event is claimed once")
	require.Equal(t, journey.EventExecutionCanceled, notes[0].Type)
}

// List keeps the executions in a state: canceled, failed, or another.
func TestListByState(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("states", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return nil, graph.Permanent(errors.New("no"))
		}),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	idle, err := rt.Start(ctx, g)
	require.NoError(t, err)
	canceled, err := rt.Start(ctx, g)
	require.NoError(t, err)
	require.NoError(t, rt.Cancel(ctx, canceled.ID, "test"))
	failed, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	_, err = rt.Get(ctx, failed.ID, "y", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)

	for state, want := range map[string]string{"canceled": canceled.ID, "failed": failed.ID, "idle": idle.ID} {
		got, err := rt.List(ctx, journey.ListQuery{Graph: "states", State: state})
		require.NoError(t, err)
		require.Len(t, got, 1, state)
		require.Equal(t, want, got[0].ID, state)
	}
	_, err = rt.List(ctx, journey.ListQuery{State: "bogus"})
	require.ErrorContains(t, err, `unknown state "bogus": use one of archived, canceled, paused, failed`)
}
