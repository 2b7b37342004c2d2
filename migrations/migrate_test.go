package migrations_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"go.uber.org/goleak"

	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.Runner{M: m})
}

func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// tables returns the names of the tables in schema.
func tables(t *testing.T, db *bun.DB, schema string) []string {
	t.Helper()
	var names []string
	require.NoError(t, db.NewSelect().
		ColumnExpr("table_name::text").
		TableExpr("information_schema.tables").
		Where("table_schema = ?", schema).
		OrderExpr("1").
		Scan(t.Context(), &names))
	return names
}

func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	schema := pgtest.Schema(t)
	logger := testLogger(t)

	const migrators = 3
	dbs := make([]*bun.DB, migrators)
	for i := range dbs {
		dbs[i] = pgtest.BunDB(t, url)
	}
	applied := make([][]string, migrators)
	errs := make([]error, migrators)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range migrators {
		wg.Go(func() {
			<-start
			applied[i], errs[i] = migrations.Migrate(t.Context(), dbs[i], schema, logger.With("migrator", i))
		})
	}
	close(start)
	wg.Wait()

	appliers := 0
	for i := range migrators {
		require.NoError(t, errs[i], "migrator %d", i)
		if len(applied[i]) > 0 {
			appliers++
			require.Contains(t, applied[i], "0001_core")
		}
	}
	require.Equal(t, 1, appliers, "exactly one migrator applies the migrations: %q", applied)
	require.Subset(t, tables(t, dbs[0], schema),
		[]string{"executions", "values", "computations", "bun_migrations", "bun_migration_locks"})

	again, err := migrations.Migrate(t.Context(), dbs[0], schema, logger)
	require.NoError(t, err)
	require.Empty(t, again, "a second run applies nothing")
}

func TestMigrateLocksPerSchema(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	busy, free := pgtest.Schema(t), pgtest.Schema(t)
	logger := testLogger(t)
	db := pgtest.BunDB(t, url)

	// Hold the lock of schema busy, as a migrator in another process would.
	holder, err := pgtest.DB(t).Conn(t.Context())
	require.NoError(t, err)
	defer holder.Close()
	_, err = holder.ExecContext(t.Context(), "SELECT pg_advisory_lock(hashtextextended($1, 0))", "journey-migrate:"+busy)
	require.NoError(t, err)

	applied, err := migrations.Migrate(t.Context(), db, free, logger)
	require.NoError(t, err, "another schema's lock does not block")
	require.NotEmpty(t, applied)

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = migrations.Migrate(ctx, db, busy, logger)
	require.Error(t, err, "Migrate waits for the lock until its context ends")
	require.Empty(t, tables(t, db, busy))

	_, err = holder.ExecContext(t.Context(), "SELECT pg_advisory_unlock(hashtextextended($1, 0))", "journey-migrate:"+busy)
	require.NoError(t, err)
	applied, err = migrations.Migrate(t.Context(), db, busy, logger)
	require.NoError(t, err)
	require.NotEmpty(t, applied)
}

func TestMigrateRejectsBadSchemaNames(t *testing.T) {
	t.Parallel()
	db := pgtest.BunDB(t, pgtest.URL(t))
	for _, schema := range []string{"", "what?", string(make([]byte, 64))} {
		_, err := migrations.Migrate(t.Context(), db, schema, nil)
		require.Error(t, err, "%q", schema)
	}
}

func TestMigrateNeedsTwoConnections(t *testing.T) {
	t.Parallel()
	db := pgtest.BunDB(t, pgtest.URL(t))
	db.SetMaxOpenConns(1)
	_, err := migrations.Migrate(t.Context(), db, pgtest.Schema(t), nil)
	require.ErrorContains(t, err, "SetMaxOpenConns")
}

// The row shape's migration (0025) does not run beside a live replica, which it would break at
// its next write: it fails with what to do, and changes nothing. Once the replica is gone (stale,
// or deleted at its graceful stop), it runs.
func TestRowShapeMigrationWaitsForTheReplicasToStop(t *testing.T) {
	t.Parallel()
	db := pgtest.BunDB(t, pgtest.URL(t))
	schema := pgtest.Schema(t)
	_, err := migrations.MigrateThrough(t.Context(), db, schema, "0024", nil)
	require.NoError(t, err)
	heartbeats := pgx.Identifier{schema, "replica_heartbeats"}.Sanitize()
	_, err = db.ExecContext(t.Context(), `INSERT INTO `+heartbeats+` (replica_id, last_heartbeat, started_at, graphs, stale_after_ms)
		VALUES ('old-1', now(), now(), '{}', 20000), ('old-2', now() - interval '1 minute', now(), '{}', 20000)`)
	require.NoError(t, err)
	before := tables(t, db, schema)

	_, err = migrations.Migrate(t.Context(), db, schema, nil)
	require.ErrorContains(t, err, "replica(s) old-1 are live in schema "+schema+": stop them, then start this release again")
	require.Equal(t, before, tables(t, db, schema), "nothing changed")

	_, err = db.ExecContext(t.Context(), `UPDATE `+heartbeats+` SET last_heartbeat = now() - interval '21 seconds'`)
	require.NoError(t, err)
	applied, err := migrations.Migrate(t.Context(), db, schema, nil)
	require.NoError(t, err)
	require.Equal(t, "0025_row_shape", applied[0])
	require.Contains(t, tables(t, db, schema), "nodes")
}

// records keeps the log records at INFO and above.
type records struct {
	mu   sync.Mutex
	list []slog.Record
}

func (r *records) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, rec)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// Migrating a fresh schema logs one line at INFO, with how many migrations it applied; the
// migrations' own lines are DEBUG. A schema up to date logs nothing at INFO.
func TestMigrateLogsOneInfoLine(t *testing.T) {
	t.Parallel()
	db, schema := pgtest.BunDB(t, pgtest.URL(t)), pgtest.Schema(t)
	for round, want := range []int{1, 0} {
		logs := &records{}
		applied, err := migrations.Migrate(t.Context(), db, schema, slog.New(logs))
		require.NoError(t, err)
		require.Len(t, logs.list, want, "round %d", round)
		if want == 0 {
			require.Empty(t, applied)
			continue
		}
		require.Equal(t, "migrated", logs.list[0].Message)
		count := int64(-1)
		logs.list[0].Attrs(func(a slog.Attr) bool {
			if a.Key == "applied" {
				count = a.Value.Int64()
			}
			return true
		})
		require.EqualValues(t, len(applied), count)
		require.Greater(t, len(applied), 20)
	}
}
