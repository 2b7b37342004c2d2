package journey

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

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
	for _, pooler := range pgtest.Poolers {
		t.Run(pooler.Name, func(t *testing.T) {
			t.Parallel()
			bouncer, direct, schema := pooler.Start(t), pgtest.URL(t), pgtest.Schema(t)
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
		})
	}
}

// PollOnly, behind PgBouncer with no direct connection: no LISTEN, and the Get on the other
// replica is answered by its poll.
func TestBehindAPoolerPollOnlyPolls(t *testing.T) {
	t.Parallel()
	for _, pooler := range pgtest.Poolers {
		t.Run(pooler.Name, func(t *testing.T) {
			t.Parallel()
			bouncer, schema := pooler.Start(t), pgtest.Schema(t)
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
		})
	}
}

// Through a pooler, a Config that says neither ListenURL nor PollOnly fails New with ErrPooler,
// which names the fix, before it writes anything; and the two together are refused.
func TestPoolerNeedsListenURLOrPollOnly(t *testing.T) {
	t.Parallel()
	for _, pooler := range pgtest.Poolers {
		t.Run(pooler.Name, func(t *testing.T) {
			t.Parallel()
			bouncer, schema := pooler.Start(t), pgtest.Schema(t)
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
		})
	}
}

// Behind Debian's PgBouncer, the runtime prepares no statement by name (CacheDescribe); behind one
// that keeps prepared statements, DatabaseURL's default_query_exec_mode=cache_statement (pgx's
// default) prepares them. There, many executions at once, from more client connections
// (pool_max_conns=40, and the runtime's own 6) than PgBouncer has server connections
// (default_pool_size, 20), all finish: a transaction that gets a server connection where its
// statement was not prepared finds it prepared there by PgBouncer. The server holds the runtime's
// statements under PgBouncer's names, and none under pgx's.
func TestBehindAPoolerStatementsArePreparedByName(t *testing.T) {
	t.Parallel()
	modes := map[string]pgx.QueryExecMode{"debian": pgx.QueryExecModeCacheDescribe, "modern": pgx.QueryExecModeCacheStatement}
	for _, pooler := range pgtest.Poolers {
		t.Run(pooler.Name, func(t *testing.T) {
			t.Parallel()
			mode, ok := modes[pooler.Name]
			require.True(t, ok, "the query mode expected behind %s", pooler.Name)
			bouncer, schema := pooler.Start(t), pgtest.Schema(t)
			g := graph.MustNew("prepared", "v1", []graph.Node{
				graph.Input("x"),
				graph.Compute("y", graph.Needs("x"), func(_ context.Context, in graph.Values) (any, error) {
					return in.Int("x") + 1, nil
				}),
			})
			u, err := url.Parse(bouncer)
			require.NoError(t, err)
			q := u.Query()
			q.Set("pool_max_conns", "40")
			u.RawQuery = q.Encode()
			rt := pooledReplica(t, Config{DatabaseURL: u.String(), ListenURL: pgtest.URL(t), Schema: schema,
				Graphs: []*graph.Graph{g}})
			require.Equal(t, mode, rt.pool.Config().ConnConfig.DefaultQueryExecMode)

			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			var eg errgroup.Group
			for i := range 64 {
				eg.Go(func() error {
					for j := range 8 {
						x := int64(i*8 + j)
						ex, err := rt.Start(ctx, g, WithValues(map[string]any{"x": x}))
						if err != nil {
							return err
						}
						v, err := rt.Get(ctx, ex.ID, "y", WaitAny())
						if err != nil {
							return err
						}
						if v.Int() != x+1 {
							return fmt.Errorf("y of x=%d is %d", x, v.Int())
						}
					}
					return nil
				})
			}
			require.NoError(t, eg.Wait())

			// Through PgBouncer, in the simple protocol, which prepares nothing: the server
			// connection that this query gets has run the runtime's statements.
			conn, err := pgx.Connect(ctx, bouncer)
			require.NoError(t, err)
			defer conn.Close(ctx)
			var byPgBouncer, byPgx int
			require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE name LIKE 'PGBOUNCER\_%'),
				count(*) FILTER (WHERE name NOT LIKE 'PGBOUNCER\_%')
				FROM pg_prepared_statements WHERE strpos(statement, $1) > 0`,
				pgx.QueryExecModeSimpleProtocol, pgx.Identifier{schema}.Sanitize()).Scan(&byPgBouncer, &byPgx))
			require.Zero(t, byPgx, "pgx's names never reach the server")
			if mode == pgx.QueryExecModeCacheStatement {
				require.Positive(t, byPgBouncer, "the runtime's statements are prepared by name, by PgBouncer")
			} else {
				require.Zero(t, byPgBouncer, "nothing is prepared by name")
			}
		})
	}
}

// A direct connection gets the plan settings as a session setting, as it connects, and not in its
// startup packet, which a pooler refuses.
func TestDirectConnectionsGetThePlanSettings(t *testing.T) {
	pgtest.SkipOnCitus(t, "connections keep plan_cache_mode auto (see sessionSettings)")
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
