package journey_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// promptly bounds a Stop whose ctx has ended: far below the 10s that a busy dispatcher made it
// wait, far above what a loaded machine needs.
const promptly = 5 * time.Second

// stopCtx is a ctx for Stop that leaves running work little time to finish.
func stopCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

func TestStopReleasesWhileTheDispatcherIsBusy(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	g := graph.MustNew("busy", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("slow", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			close(started)
			<-ctx.Done() // runs until the replica stops
			return nil, ctx.Err()
		}),
	})
	var busy atomic.Bool
	claiming := make(chan struct{}, 1)
	unblock := make(chan struct{})
	cfg := testConfig(t, g)
	cfg.ReplicaID = "busy"
	cfg.Test.Hooks.Claiming = func(ctx context.Context) {
		if !busy.Load() {
			return
		}
		select {
		case claiming <- struct{}{}:
		default:
		}
		// A claim slower than its own timeout: it ends when it is canceled.
		<-ctx.Done()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			<-unblock
		}
	}
	defer close(unblock)
	rt, err := journey.New(context.Background(), cfg)
	require.NoError(t, err)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)
	<-started
	busy.Store(true)
	select { // the next poll claims again, and blocks
	case <-claiming:
	case <-ctx.Done():
		t.Fatal("the dispatcher did not claim again")
	}

	start := time.Now()
	if err := rt.Stop(stopCtx(t)); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if took := time.Since(start); took > promptly {
		t.Errorf("Stop took %v: it waited for the busy dispatcher", took)
	}

	// A replica of another graph reads the attempts, and claims none of them.
	other := graph.MustNew("other", "v1", []graph.Node{graph.Input("y")})
	ocfg := testConfig(t, other)
	ocfg.Schema, ocfg.ReplicaID = cfg.Schema, "observer"
	observer := newRuntime(t, ocfg)
	got := attempts(t, observer, ex.ID, "slow")
	require.Len(t, got, 1)
	require.Equal(t, journey.StateAvailable, got[0].State, "released for another replica")
	require.Equal(t, 1, got[0].Attempt, "the release consumed no attempt")
}

func TestStopWaitsForOnSaveOnlyUntilCtxEnds(t *testing.T) {
	t.Parallel()
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock() // leave no OnSave goroutine behind
	g := graph.MustNew("saving", "v1", []graph.Node{
		graph.Input("x", graph.OnSave(func(ctx context.Context, e graph.SaveEvent) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
		})),
	})
	rt, err := journey.New(context.Background(), testConfig(t, g))
	require.NoError(t, err)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)
	<-entered

	stopped := make(chan error, 1)
	go func() { stopped <- rt.Stop(stopCtx(t)) }()
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(promptly):
		unblock()
		t.Fatalf("Stop waited for OnSave more than %v after its ctx ended (then returned %v)", promptly, <-stopped)
	}
}
