package journey_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

func TestNotificationsWakeWorkAndWaiters(t *testing.T) {
	t.Parallel()
	g := onboardingGraph(t)
	cfg := testConfig(t, g)
	cfg.PollInterval = time.Hour // only LISTEN/NOTIFY can wake the dispatcher and Get
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.SetMany(ctx, ex.ID, map[string]any{"name": "Mario", "email": "mario@example.com"})
	require.NoError(t, err)
	v, err := rt.Get(ctx, ex.ID, "greeting", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, "Welcome, Mario at mario@example.com", v.String())

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = rt.Get(short, ex.ID, "greeting", journey.WaitNewerThan(v.Revision))
	require.ErrorIs(t, err, context.DeadlineExceeded, "waiting ends with ctx")
}

func TestGracefulStopHandsOverRunningWork(t *testing.T) {
	t.Parallel()
	started := make(chan string, 10)
	var stopped atomic.Bool
	g := graph.MustNew("handover", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("quick", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return "quick", nil
		}),
		graph.Compute("slow", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			if !stopped.Load() {
				started <- "first"
				<-ctx.Done() // runs until the replica stops
				return nil, ctx.Err()
			}
			return "done", nil
		}),
	})
	cfg := testConfig(t, g)
	cfg.ReplicaID = "leaving"
	a, err := journey.New(context.Background(), cfg)
	require.NoError(t, err)
	ctx := testCtx(t)
	ex, err := a.Start(ctx, g)
	require.NoError(t, err)
	_, err = a.Set(ctx, ex.ID, "x", "first")
	require.NoError(t, err)
	<-started
	_, err = a.Get(ctx, ex.ID, "quick", journey.WaitAny())
	require.NoError(t, err)

	stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	require.NoError(t, a.Stop(stopCtx))
	stopped.Store(true)
	_, err = a.Get(ctx, ex.ID, "slow")
	require.ErrorIs(t, err, journey.ErrStopped)

	cfg.ReplicaID = "taking-over"
	b := newRuntime(t, cfg)
	v, err := b.Get(ctx, ex.ID, "slow", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, "done", v.String())
	got := unreleased(t, attempts(t, b, ex.ID, "slow"))
	require.Len(t, got, 1)
	require.Equal(t, journey.StateSuccess, got[0].State)
	require.Equal(t, 1, got[0].Attempt, "the release consumed no attempt")
	require.Equal(t, "taking-over", got[0].ReplicaID)
}

func TestReplicasHeartbeatAndLeave(t *testing.T) {
	t.Parallel()
	g := onboardingGraph(t)
	cfg := testConfig(t, g)
	cfg.ReplicaID = "staying"
	a := newRuntime(t, cfg)
	cfg.ReplicaID = "leaving"
	b, err := journey.New(context.Background(), cfg)
	require.NoError(t, err)
	ctx := testCtx(t)

	replicas, err := a.Replicas(ctx)
	require.NoError(t, err)
	ids := map[string]journey.Replica{}
	for _, r := range replicas {
		ids[r.ID] = r
	}
	require.Len(t, ids, 2, "each replica writes its heartbeat at New")
	require.False(t, ids["leaving"].Stale)
	require.Equal(t, []string{"onboarding@v1"}, ids["leaving"].Graphs)

	require.NoError(t, b.Stop(ctx))
	replicas, err = a.Replicas(ctx)
	require.NoError(t, err)
	require.Len(t, replicas, 1, "a graceful stop deletes the replica's row")
	require.Equal(t, "staying", replicas[0].ID)
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	g := onboardingGraph(t)
	cfg := testConfig(t, g)
	cfg.ReplicaHeartbeatInterval = time.Second
	cfg.ReplicaStaleAfter = 1500 * time.Millisecond
	cfg.MaxWorkers = -1
	_, err := journey.New(context.Background(), cfg)
	require.ErrorContains(t, err, "ReplicaStaleAfter")
	require.ErrorContains(t, err, "MaxWorkers")
	_, err = journey.New(context.Background(), journey.Config{Graphs: []*graph.Graph{g}})
	require.ErrorContains(t, err, "DatabaseURL")
}
