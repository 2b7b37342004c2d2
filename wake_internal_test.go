package journey

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
)

// xPlusOneOnceReleased is a compute function that returns x + 1 once release is closed, or its
// context's error if that ends first.
func xPlusOneOnceReleased(release <-chan struct{}) graph.ComputeFunc {
	return func(ctx context.Context, in graph.Values) (any, error) {
		select {
		case <-release:
			return in.Int("x") + 1, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// A write whose COMMIT the server accepted, while the client saw an error, still wakes the Get
// waiting on its change: the listener dropped the change's NOTIFY, as the write was to hand the
// value over itself. The Get must not be left to its poll, here 30s.
func TestWaitingGetWokenWhenTheCommitsOutcomeIsUnknown(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	g := graph.MustNew("unsure", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), xPlusOneOnceReleased(release)),
	})
	var rt *Runtime
	var target atomic.Pointer[string] // the execution whose next commit fails
	var failed atomic.Bool
	// Once the server has committed y's value, the hook waits until the listener has heard the
	// commit's NOTIFY, and dropped it: the listener hears a NOTIFY sent after it, after it. Then
	// the client sees an error.
	committed := func(handed []string) error {
		id := target.Load()
		if id == nil || !slices.Contains(handed, *id) || !failed.CompareAndSwap(false, true) {
			return nil
		}
		probe, remove := rt.waiters.add("probe", "n", 0)
		defer remove()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := rt.pool.Exec(ctx, "SELECT pg_notify($1, $2)", rt.store.Channel(), persistence.PayloadExecution+"probe"); err != nil {
			t.Errorf("sending the probe: %v", err)
		}
		select {
		case <-probe.ch:
		case <-ctx.Done():
			t.Error("the listener did not hear the probe")
		}
		return errors.New("injected: the connection broke as the COMMIT was sent")
	}
	var err error
	rt, err = New(context.Background(), Config{
		DatabaseURL: pgtest.URL(t), Schema: pgtest.Schema(t), Graphs: []*graph.Graph{g},
		PollInterval: 30 * time.Second, SweepInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Test: TestConfig{StoreHooks: persistence.Hooks{Committed: committed}},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ex, err := rt.Start(ctx, g, WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	target.Store(&ex.ID)

	gctx, gcancel := context.WithTimeout(ctx, 5*time.Second) // far below the poll
	defer gcancel()
	got := waitingGet(gctx, t, rt, ex.ID, "y")
	close(release) // y returns once the Get has looked, found nothing, and waits
	r := <-got
	require.NoError(t, r.err)
	require.Equal(t, int64(2), r.v.Int())
	require.True(t, failed.Load(), "the commit of y's value failed")
}

// getWaits reports whether a Get waits on execution id, its first look done.
// getResult is what a Get returned.
type getResult struct {
	v   graph.Value
	err error
}

// waitingGet starts rt.Get(ctx, id, node, WaitAny()) and returns once the Get has looked, found
// nothing and waits, with the channel of its answer.
func waitingGet(ctx context.Context, t *testing.T, rt *Runtime, id, node string) <-chan getResult {
	t.Helper()
	got := make(chan getResult, 1)
	go func() {
		v, err := rt.Get(ctx, id, node, WaitAny())
		got <- getResult{v, err}
	}()
	for !getWaits(rt.waiters, id) {
		select {
		case <-ctx.Done():
			t.Fatal("the Get never waited")
		case <-time.After(5 * time.Millisecond):
		}
	}
	return got
}

func getWaits(w *waiters, id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for wt := range w.m[id] {
		if wt.seen.Load() >= 0 {
			return true
		}
	}
	return false
}
