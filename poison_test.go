package journey_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// (g) User code that the runtime calls while it advances an execution (a When predicate, a
// ConcurrencyKey, a Backoff) and that panics fails its own node, with the panic's text, once;
// the process, the execution's other nodes and the other executions go on.
func TestPanickingUserCodeFailsOnlyItsNode(t *testing.T) {
	t.Parallel()
	boom := func(v graph.Values) bool { return v.String("x") == "boom" }
	// gated's gate holds while x is unset, so it runs at once; its attempt ends only after x is set
	// to "boom", when its gate panics on the values of the completion.
	started, release := make(chan struct{}, 1), make(chan struct{})
	g := graph.MustNew("poison", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("gated", graph.When("x", func(v graph.Value) bool {
			if v.String() == "boom" {
				panic("predicate exploded")
			}
			return true
		}), func(ctx context.Context, in graph.Values) (any, error) {
			select {
			case started <- struct{}{}:
			default:
			}
			<-release
			return "gated", nil
		}),
		graph.Compute("keyed", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) { return "keyed", nil },
			graph.ConcurrencyKey(func(v graph.Values) string {
				if boom(v) {
					panic("key exploded")
				}
				return v.String("x")
			})),
		graph.Compute("flaky", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			if boom(in) {
				return nil, errors.New("try again")
			}
			return "flaky", nil
		}, graph.Backoff(func(int) time.Duration { panic("backoff exploded") })),
		graph.Compute("fine", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) { return "fine", nil }),
	})
	failed := make(chan journey.ExecutionEvent, 10)
	cfg := testConfig(t, g)
	cfg.OnExecutionFailed = func(ctx context.Context, e journey.ExecutionEvent) error {
		failed <- e
		return nil
	}
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)

	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	<-started
	_, err = rt.Set(ctx, ex.ID, "x", "boom")
	require.NoError(t, err)
	close(release)
	v, err := rt.Get(ctx, ex.ID, "fine", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, "fine", v.String(), "the other nodes run")
	for node, text := range map[string]string{
		"gated": `the gate of node "gated" panicked: predicate exploded`,
		"keyed": `the ConcurrencyKey of node "keyed" panicked: key exploded`,
		"flaky": `the Backoff of node "flaky" panicked: backoff exploded`,
	} {
		_, err := rt.Get(ctx, ex.ID, node, journey.WaitAny())
		require.ErrorIs(t, err, journey.ErrComputationFailed, node)
		require.ErrorContains(t, err, text)
		require.Len(t, attempts(t, rt, ex.ID, node), 1, "%s failed once, for good", node)
	}
	select {
	case e := <-failed:
		require.Equal(t, ex.ID, e.ExecutionID)
	case <-ctx.Done():
		t.Fatal("the failure was not announced")
	}

	// Another execution of the same graph, with other values, runs through.
	other, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, other.ID, "x", "calm")
	require.NoError(t, err)
	for _, node := range []string{"gated", "keyed", "flaky", "fine"} {
		v, err := rt.Get(ctx, other.ID, node, journey.WaitAny())
		require.NoError(t, err, node)
		require.Equal(t, node, v.String())
	}
}

// The work has connections of its own: with the pool used up by callers, an attempt that runs is
// still recorded, and the next one claimed and recorded too.
func TestWorkOutlivesAFullPool(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	g := graph.MustNew("full-pool", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			started <- struct{}{}
			<-release
			return 1, nil
		}),
		graph.Compute("z", graph.Needs("y"), func(ctx context.Context, in graph.Values) (any, error) { return 2, nil }),
	})
	cfg := testConfig(t, g)
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	require.NoError(t, err)
	pcfg.MaxConns = 3
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg.DatabaseURL, cfg.Pool = "", pool
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	e, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("y did not start")
	}

	conn, err := pgx.Connect(ctx, pcfg.ConnString())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for range pcfg.MaxConns {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		t.Cleanup(c.Release)
	}
	close(release)
	waitFor(t, "z's value while the pool is full", func() bool {
		var n int
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{cfg.Schema}.Sanitize()+
			`."values" WHERE execution_id = $1 AND node = 'z'`, e.ID).Scan(&n))
		return n == 1
	})
}

// (f) The heartbeats have connections of their own: a pool that the application and the work
// have used up does not starve them, and the replica is not taken for dead.
func TestHeartbeatsOutliveAFullPool(t *testing.T) {
	t.Parallel()
	g := onboardingGraph(t)
	cfg := testConfig(t, g)
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	require.NoError(t, err)
	pcfg.MaxConns = 3
	pcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg.DatabaseURL, cfg.Pool = "", pool
	cfg.ReplicaHeartbeatInterval, cfg.ReplicaStaleAfter = 50*time.Millisecond, time.Second
	newRuntime(t, cfg)
	ctx := testCtx(t)

	// The test reads the heartbeat on a connection of its own, as the pool is about to be full.
	conn, err := pgx.Connect(ctx, pcfg.ConnString())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	beat := func() (at time.Time) {
		require.NoError(t, conn.QueryRow(ctx, "SELECT last_heartbeat FROM "+pgx.Identifier{cfg.Schema}.Sanitize()+".replica_heartbeats").Scan(&at))
		return at
	}
	for range pcfg.MaxConns {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		t.Cleanup(c.Release)
	}
	for range 3 {
		last := beat()
		waitFor(t, "a heartbeat while the pool is full", func() bool { return beat().After(last) })
	}
}
