package journey

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// pooledReplica starts a replica on the schema, through the transaction pooler at bouncer, and
// stops it when the test ends.
func pooledReplica(t *testing.T, cfg Config) *Runtime {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.SweepInterval = 50 * time.Millisecond
	rt, err := New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))
	})
	return rt
}

// acrossReplicas starts an execution on worker, which claims its computation, and only then
// starts the waiter (newWaiter), so that the worker alone can have claimed it; the waiter's
// Get(WaitAny) of the computed value waits before the function is released, so its answer can
// only come from what wakes waiter.
func acrossReplicas(t *testing.T, g *graph.Graph, release chan struct{}, worker *Runtime, newWaiter func() *Runtime) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ex, err := worker.Start(ctx, g, WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		comps, err := worker.Computations(ctx, ex.ID)
		return err == nil && len(comps) == 1 && comps[0].State == StateRunning
	}, 30*time.Second, 5*time.Millisecond, "the worker claims the computation")
	waiter := newWaiter()

	got := waitingGet(ctx, t, waiter, ex.ID, "y")
	close(release)
	r := <-got
	require.NoError(t, r.err)
	require.Equal(t, int64(2), r.v.Int())

	comps, err := waiter.Computations(ctx, ex.ID)
	require.NoError(t, err)
	require.Len(t, comps, 1)
	require.Equal(t, worker.cfg.ReplicaID, comps[0].ReplicaID, "the worker ran it, not the waiter")
}

// Behind PgBouncer in transaction mode, with ListenURL a direct connection, a Get on one replica
// is woken by the NOTIFY of the other's completion: its poll, an hour, would never come.
func TestBehindAPoolerListenURLWakesGet(t *testing.T) {
	t.Parallel()
	bouncer, direct, schema := pgtest.Bouncer(t), pgtest.URL(t), pgtest.Schema(t)
	release := make(chan struct{})
	g := graph.MustNew("pooled", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), xPlusOneOnceReleased(release)),
	})
	cfg := Config{DatabaseURL: bouncer, ListenURL: direct, Schema: schema, Graphs: []*graph.Graph{g}, PollInterval: time.Hour}
	cfg.ReplicaID = "worker"
	worker := pooledReplica(t, cfg)
	cfg.ReplicaID = "waiter"
	acrossReplicas(t, g, release, worker, func() *Runtime { return pooledReplica(t, cfg) })
}

// PollOnly, behind PgBouncer with no direct connection: no LISTEN, and the Get on the other
// replica is answered by its poll.
func TestBehindAPoolerPollOnlyPolls(t *testing.T) {
	t.Parallel()
	bouncer, schema := pgtest.Bouncer(t), pgtest.Schema(t)
	release := make(chan struct{})
	g := graph.MustNew("polled", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), xPlusOneOnceReleased(release)),
	})
	cfg := Config{DatabaseURL: bouncer, PollOnly: true, Schema: schema, Graphs: []*graph.Graph{g},
		PollInterval: 100 * time.Millisecond}
	cfg.ReplicaID = "worker"
	worker := pooledReplica(t, cfg)
	cfg.ReplicaID = "waiter"
	acrossReplicas(t, g, release, worker, func() *Runtime {
		waiter := pooledReplica(t, cfg)
		require.Nil(t, waiter.listener, "PollOnly starts no listener")
		return waiter
	})
}

// Through a pooler, a Config that says neither ListenURL nor PollOnly fails New with ErrPooler,
// which names the fix, before it writes anything; and the two together are refused.
func TestPoolerNeedsListenURLOrPollOnly(t *testing.T) {
	t.Parallel()
	bouncer, schema := pgtest.Bouncer(t), pgtest.Schema(t)
	g := graph.MustNew("unpooled", "v1", []graph.Node{graph.Input("x")})
	_, err := New(context.Background(), Config{DatabaseURL: bouncer, Schema: schema, Graphs: []*graph.Graph{g},
		Logger: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, ErrPooler)
	require.ErrorContains(t, err, "ListenURL")

	var exists bool
	require.NoError(t, pgtest.DB(t).QueryRowContext(t.Context(), "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
	require.False(t, exists, "nothing was migrated")

	_, err = New(context.Background(), Config{DatabaseURL: bouncer, ListenURL: pgtest.URL(t), PollOnly: true,
		Schema: schema, Graphs: []*graph.Graph{g}})
	require.ErrorContains(t, err, "ListenURL and PollOnly are both set")
	_, err = New(context.Background(), Config{DatabaseURL: bouncer, ListenURL: "postgres://%zz", Schema: schema,
		Graphs: []*graph.Graph{g}})
	require.ErrorContains(t, err, "config: ListenURL")
}

// A direct connection gets the plan settings as a session setting, as it connects, and not in its
// startup packet, which a pooler refuses.
func TestDirectConnectionsGetThePlanSettings(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("direct", "v1", []graph.Node{graph.Input("x")})
	rt := pooledReplica(t, Config{DatabaseURL: pgtest.URL(t), Schema: pgtest.Schema(t), Graphs: []*graph.Graph{g}})
	require.Empty(t, rt.pool.Config().ConnConfig.RuntimeParams["plan_cache_mode"])
	var mode, idle string
	require.NoError(t, rt.pool.QueryRow(t.Context(),
		"SELECT current_setting('plan_cache_mode'), current_setting('idle_in_transaction_session_timeout')").Scan(&mode, &idle))
	require.Equal(t, "force_generic_plan", mode)
	require.Equal(t, "30s", idle)
}
