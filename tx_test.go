package journey_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// txGraph is a graph whose y is x + 1, with an optional concurrency key on y, and counts y's
// runs in ran.
func txGraph(name string, ran *atomic.Int64, opts ...graph.NodeOption) *graph.Graph {
	return graph.MustNew(name, "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(_ context.Context, in graph.Values) (any, error) {
			ran.Add(1)
			return in.Int("x") + 1, nil
		}, opts...),
	})
}

// txRuntime starts a runtime that only a NOTIFY wakes (its poll and its sweeps, which promote due
// work too, are an hour apart), and a pool of the application's connections, with an orders
// table of its own in the runtime's schema.
func txRuntime(t *testing.T, g *graph.Graph) (*journey.Runtime, *pgxpool.Pool, string, string) {
	t.Helper()
	cfg := testConfig(t, g)
	cfg.PollInterval, cfg.SweepInterval = time.Hour, time.Hour
	rt := newRuntime(t, cfg)
	pool, err := pgxpool.New(testCtx(t), cfg.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	orders := pgx.Identifier{cfg.Schema, "orders"}.Sanitize()
	_, err = pool.Exec(testCtx(t), "CREATE TABLE "+orders+" (id text PRIMARY KEY)")
	require.NoError(t, err)
	return rt, pool, orders, cfg.Schema
}

// appTx is a transaction of the application's, of one of the kinds StartTx takes.
type appTx struct {
	tx       journey.Tx
	exec     func(sql string, args ...any) error
	commit   func() error
	rollback func() error
}

// txKinds begin a transaction of each kind StartTx takes, on the test database: a pgx.Tx of a
// pool, a *sql.Tx of pgx's database/sql driver, and a bun.Tx.
var txKinds = []struct {
	name  string
	begin func(t *testing.T, pool *pgxpool.Pool) appTx
}{{"pgx", func(t *testing.T, pool *pgxpool.Pool) appTx {
	t.Helper()
	ctx := testCtx(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return appTx{tx, func(sql string, args ...any) error { _, err := tx.Exec(ctx, sql, args...); return err },
		func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }}
}}, {"database/sql", func(t *testing.T, _ *pgxpool.Pool) appTx {
	t.Helper()
	ctx := testCtx(t)
	tx, err := pgtest.DB(t).BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	return appTx{tx, func(sql string, args ...any) error { _, err := tx.ExecContext(ctx, sql, args...); return err },
		tx.Commit, tx.Rollback}
}}, {"database/sql, prepared", func(t *testing.T, pool *pgxpool.Pool) appTx {
	t.Helper()
	ctx := testCtx(t)
	db := stdlib.OpenDBFromPool(pool) // pgx's default mode: statements prepared and described
	t.Cleanup(func() { _ = db.Close() })
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	return appTx{tx, func(sql string, args ...any) error { _, err := tx.ExecContext(ctx, sql, args...); return err },
		tx.Commit, tx.Rollback}
}}, {"bun", func(t *testing.T, _ *pgxpool.Pool) appTx {
	t.Helper()
	ctx := testCtx(t)
	tx, err := pgtest.BunDB(t, pgtest.URL(t)).BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	return appTx{tx, func(sql string, args ...any) error { _, err := tx.ExecContext(ctx, sql, args...); return err },
		tx.Commit, tx.Rollback}
}}}

// rowsOf counts the rows of execution id in each per-execution table of the runtime's schema.
func rowsOf(t *testing.T, pool *pgxpool.Pool, schema, id string) int {
	t.Helper()
	var n int
	for _, table := range []string{"executions", "nodes", "attempts", "value_history", "notification_claims"} {
		column := "execution_id"
		if table == "executions" {
			column = "id"
		}
		var c int
		require.NoError(t, pool.QueryRow(testCtx(t), "SELECT count(*) FROM "+pgx.Identifier{schema, table}.Sanitize()+
			" WHERE "+column+" = $1", id).Scan(&c))
		n += c
	}
	return n
}

// A Start in the application's transaction commits with the application's rows: nothing of it
// is visible or runs before, and its work runs after, woken by the COMMIT's NOTIFY (the poll is
// an hour apart).
func TestStartTxCommitsWithTheApplicationsRows(t *testing.T) {
	t.Parallel()
	for _, kind := range txKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			var ran atomic.Int64
			g := txGraph("start-tx", &ran)
			rt, pool, orders, _ := txRuntime(t, g)
			ctx := testCtx(t)

			tx := kind.begin(t, pool)
			require.NoError(t, tx.exec("INSERT INTO "+orders+" VALUES ('order/1')"))
			ex, err := rt.StartTx(ctx, tx.tx, g, journey.WithKey("order/1"), journey.WithValues(map[string]any{"x": 1}))
			require.NoError(t, err)
			require.False(t, ex.Existing)

			_, err = rt.Get(ctx, ex.ID, "x")
			require.ErrorIs(t, err, journey.ErrNotFound, "invisible before the commit")
			require.Zero(t, ran.Load(), "nothing runs before the commit")
			require.NoError(t, tx.commit())

			y, err := rt.Get(ctx, ex.ID, "y", journey.WaitAny())
			require.NoError(t, err)
			require.EqualValues(t, 2, y.Int())
			require.EqualValues(t, 1, ran.Load())
			var order string
			require.NoError(t, pool.QueryRow(ctx, "SELECT id FROM "+orders).Scan(&order))
			require.Equal(t, "order/1", order)
			again, err := rt.Start(ctx, g, journey.WithKey("order/1"))
			require.NoError(t, err)
			require.True(t, again.Existing, "the key is held once committed")
			require.Equal(t, ex.ID, again.ID)
		})
	}
}

// A Start in a transaction that rolls back leaves no trace: no row, no run, and its key free.
func TestStartTxRolledBackLeavesNoTrace(t *testing.T) {
	t.Parallel()
	for _, kind := range txKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			var ran atomic.Int64
			g := txGraph("start-tx-rollback", &ran)
			rt, pool, orders, schema := txRuntime(t, g)
			ctx := testCtx(t)

			tx := kind.begin(t, pool)
			require.NoError(t, tx.exec("INSERT INTO "+orders+" VALUES ('order/2')"))
			gone, err := rt.StartTx(ctx, tx.tx, g, journey.WithKey("order/2"), journey.WithValues(map[string]any{"x": 1}))
			require.NoError(t, err)
			require.NoError(t, tx.rollback())

			// A Start of the same key afterwards makes a new execution, whose run is the only one.
			ex, err := rt.Start(ctx, g, journey.WithKey("order/2"), journey.WithValues(map[string]any{"x": 10}))
			require.NoError(t, err)
			require.False(t, ex.Existing)
			require.NotEqual(t, gone.ID, ex.ID)
			y, err := rt.Get(ctx, ex.ID, "y", journey.WaitAny())
			require.NoError(t, err)
			require.EqualValues(t, 11, y.Int())
			require.EqualValues(t, 1, ran.Load())
			require.Zero(t, rowsOf(t, pool, schema, gone.ID))
			var orderRows int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+orders).Scan(&orderRows))
			require.Zero(t, orderRows)
		})
	}
}

// A Set in the application's transaction takes effect at its commit, and not at all if it
// rolls back.
func TestSetTxTakesEffectAtTheCommit(t *testing.T) {
	t.Parallel()
	for _, kind := range txKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			var ran atomic.Int64
			g := txGraph("set-tx", &ran)
			rt, pool, _, _ := txRuntime(t, g)
			ctx := testCtx(t)
			ex, err := rt.Start(ctx, g)
			require.NoError(t, err)

			tx := kind.begin(t, pool)
			rev, err := rt.SetTx(ctx, tx.tx, ex.ID, "x", 5)
			require.NoError(t, err)
			_, err = rt.Get(ctx, ex.ID, "x")
			require.ErrorIs(t, err, journey.ErrNotSet, "not set before the commit")
			require.NoError(t, tx.commit())
			x, err := rt.Get(ctx, ex.ID, "x")
			require.NoError(t, err)
			require.Equal(t, rev, x.Revision)
			y, err := rt.Get(ctx, ex.ID, "y", journey.WaitAny())
			require.NoError(t, err)
			require.EqualValues(t, 6, y.Int())

			tx = kind.begin(t, pool)
			_, err = rt.SetManyTx(ctx, tx.tx, ex.ID, map[string]any{"x": 7})
			require.NoError(t, err)
			require.NoError(t, tx.rollback())
			x, err = rt.Get(ctx, ex.ID, "x")
			require.NoError(t, err)
			require.EqualValues(t, 5, x.Int(), "the rolled-back Set left no value")
			require.EqualValues(t, 1, ran.Load())
			require.Len(t, attempts(t, rt, ex.ID, "y"), 1, "and no attempt")
		})
	}
}

// StartTx refuses what is not a transaction it can write in, and says what to pass.
func TestStartTxRefusesWhatIsNoTransaction(t *testing.T) {
	t.Parallel()
	var ran atomic.Int64
	g := txGraph("start-tx-refused", &ran)
	rt, _, _, _ := txRuntime(t, g)
	for _, tx := range []journey.Tx{nil, "a string", (*sql.Tx)(nil)} {
		_, err := rt.StartTx(testCtx(t), tx, g)
		require.ErrorContains(t, err, "pass the application's transaction, a pgx.Tx, a *sql.Tx or a bun.Tx")
	}
}

// Work that waits for a concurrency key is promoted by a replica that the COMMIT's NOTIFY wakes:
// the transaction itself takes no promotion lock.
func TestStartTxOfGatedWorkIsPromotedAtTheCommit(t *testing.T) {
	t.Parallel()
	var ran atomic.Int64
	g := txGraph("start-tx-gated", &ran, graph.ConcurrencyKey(func(graph.Values) string { return "one" }))
	rt, pool, _, _ := txRuntime(t, g)
	ctx := testCtx(t)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	ex, err := rt.StartTx(ctx, tx, g, journey.WithValues(map[string]any{"x": 2}))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	y, err := rt.Get(ctx, ex.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	require.EqualValues(t, 3, y.Int())
}

// Behind PgBouncer in transaction pooling mode, the application's transaction and the runtime's
// connections go through the pooler; the COMMIT's NOTIFY reaches the runtime's LISTEN, made
// directly.
func TestStartTxBehindAPooler(t *testing.T) {
	t.Parallel()
	for _, pooler := range pgtest.Poolers {
		t.Run(pooler.Name, func(t *testing.T) {
			t.Parallel()
			var ran atomic.Int64
			g := txGraph("start-tx-pooled", &ran)
			bouncer := pooler.Start(t)
			cfg := testConfig(t, g)
			cfg.DatabaseURL, cfg.ListenURL = bouncer, pgtest.URL(t)
			cfg.PollInterval, cfg.SweepInterval = time.Hour, time.Hour
			rt := newRuntime(t, cfg)
			ctx := testCtx(t)
			pool, err := pgxpool.New(ctx, bouncer)
			require.NoError(t, err)
			defer pool.Close()

			for _, commit := range []bool{false, true} {
				tx, err := pool.Begin(ctx)
				require.NoError(t, err)
				ex, err := rt.StartTx(ctx, tx, g, journey.WithValues(map[string]any{"x": 41}))
				require.NoError(t, err)
				if !commit {
					require.NoError(t, tx.Rollback(ctx))
					_, err = rt.Get(ctx, ex.ID, "x")
					require.ErrorIs(t, err, journey.ErrNotFound)
					continue
				}
				require.NoError(t, tx.Commit(ctx))
				y, err := rt.Get(ctx, ex.ID, "y", journey.WaitAny())
				require.NoError(t, err)
				require.EqualValues(t, 42, y.Int())
			}
			require.EqualValues(t, 1, ran.Load())
		})
	}
}
