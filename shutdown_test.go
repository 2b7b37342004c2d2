package journey_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/actors"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
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
	got := unreleased(t, attempts(t, observer(t, cfg.Schema), ex.ID, "slow"))
	require.Len(t, got, 1)
	require.Equal(t, journey.StateAvailable, got[0].State, "released for another replica")
	require.Equal(t, 1, got[0].Attempt, "the release consumed no attempt")
}

// A function deaf to its context past Stop's grace is left RUNNING, and the replica's row with it,
// as a crashed replica's would be: its late result is dropped, and another replica takes the
// attempt over once its heartbeat deadline has passed, never while it is still fresh.
func TestStopLeavesADeafFunctionToItsHeartbeatDeadline(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int32
	g := graph.MustNew("deaf", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("deaf", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			if calls.Add(1) > 1 {
				return "taken over", nil
			}
			close(started)
			<-release // deaf to ctx
			return "late", nil
		}, graph.Heartbeat(50*time.Millisecond, 300*time.Millisecond), graph.MaxAttempts(2), graph.Backoff(fastBackoff)),
	})
	outcomes := make(chan string, 1)
	cfg := testConfig(t, g)
	cfg.ReplicaID = "leaving"
	cfg.Test.StopGrace = 100 * time.Millisecond
	cfg.Test.Hooks.ComputationFinished = func(_ *persistence.Computation, outcome string) { outcomes <- outcome }
	rt, err := journey.New(context.Background(), cfg)
	require.NoError(t, err)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	<-started
	require.NoError(t, rt.Stop(stopCtx(t)))

	// A replica of another graph reads what the stop left.
	observer := observer(t, cfg.Schema)
	got := attempts(t, observer, ex.ID, "deaf")
	require.Len(t, got, 1)
	require.Equal(t, journey.StateRunning, got[0].State, "not released while its function runs")
	replicas, err := observer.Replicas(ctx)
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(replicas, func(r journey.Replica) bool { return r.ID == "leaving" }),
		"the replica's row stays, so that its attempt is not taken over at once")

	close(release)
	require.Equal(t, actors.OutcomeOrphaned, <-outcomes, "the late result is dropped")

	cfg.ReplicaID, cfg.Test.Hooks = "taking-over", actors.Hooks{}
	taker := newRuntime(t, cfg)
	v, err := taker.Get(ctx, ex.ID, "deaf", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, "taken over", v.String())
	got = attempts(t, taker, ex.ID, "deaf")
	require.Len(t, got, 2)
	require.Equal(t, journey.StateAbandoned, got[0].State)
	require.Equal(t, "leaving", got[0].ReplicaID)
	require.Equal(t, "abandoned: heartbeat deadline passed", got[0].Error)
	require.NotNil(t, got[0].FinishedAt)
	require.NotNil(t, got[0].HeartbeatDeadline)
	require.False(t, got[0].FinishedAt.Before(*got[0].HeartbeatDeadline), "taken over only once its heartbeat deadline had passed")
	require.Equal(t, journey.StateSuccess, got[1].State)
	require.Equal(t, "taking-over", got[1].ReplicaID)
}

// A claim that the database committed but whose answer never reached the replica, because the
// stop ended it, is released by the stop: no attempt of the replica took it up. It waited for the
// sweeper before, which abandoned it, and its retry used up an attempt (journey bench's setup
// replica, in 6 to 8 runs of 20 of -graph gated -n 20).
func TestStopReleasesTheClaimsThatNoAttemptTookUp(t *testing.T) {
	t.Parallel()
	g := localGraph("unanswered")
	cfg := testConfig(t, g)
	cfg.ReplicaID = "unanswered-replica"
	rt, err := journey.New(context.Background(), cfg)
	require.NoError(t, err)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	_, err = rt.Get(ctx, ex.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	// The unanswered claim: a second attempt of y, RUNNING under the replica's claim, which
	// replaces the first.
	table := func(name string) string { return pgx.Identifier{cfg.Schema, name}.Sanitize() }
	const attemptColumns = `lane, execution_id, node, graph_key, attempt_id, state, attempt, max_attempts, replica_id,
		claim_token, run_at, claimed_at, deadline, heartbeat_deadline, last_heartbeat_at, abandon_after_ms,
		heartbeat_timeout_ms, computed_with, error, concurrency_key, max_parallel, created_at, finished_at,
		available_at, traceparent`
	var id int64
	require.NoError(t, pgtest.DB(t).QueryRowContext(ctx, `WITH replaced AS (
			INSERT INTO `+table("attempts")+` (`+attemptColumns+`)
			SELECT `+attemptColumns+` FROM `+table("nodes")+` WHERE execution_id = $1 AND node = 'y'
			RETURNING lane, execution_id, node, attempt_id)
		UPDATE `+table("nodes")+` n SET attempt_id = r.attempt_id + 1, state = 'RUNNING', attempt = 2, run_at = now(),
			replica_id = $2, claim_token = $3, claimed_at = now(), deadline = now() + interval '1 hour',
			heartbeat_deadline = now() + interval '1 hour', finished_at = NULL, error = NULL
		FROM replaced r WHERE n.lane = r.lane AND n.execution_id = r.execution_id AND n.node = r.node
		RETURNING n.attempt_id`, ex.ID, cfg.ReplicaID, "3f2a9c1e-0b7d-4e5a-9c3f-1d2e3f4a5b6c").Scan(&id))

	require.NoError(t, rt.Stop(stopCtx(t)))
	all := attempts(t, observer(t, cfg.Schema), ex.ID, "y")
	got := unreleased(t, all)
	require.Len(t, got, 2)
	require.Len(t, all, 3, "the claim released, in the history")
	require.Equal(t, id, all[1].ID)
	require.Equal(t, journey.StateAvailable, got[1].State, "released for another replica")
	require.Equal(t, 2, got[1].Attempt, "the release consumed no attempt")
}

// observer starts a replica of another graph on schema, which reads the executions there and
// claims none of their attempts.
func observer(t *testing.T, schema string) *journey.Runtime {
	t.Helper()
	cfg := testConfig(t, graph.MustNew("other", "v1", []graph.Node{graph.Input("y")}))
	cfg.Schema, cfg.ReplicaID = schema, "observer"
	return newRuntime(t, cfg)
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
