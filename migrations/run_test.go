package migrations

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/internal/pgtest"
)

func TestLoadEmbedded(t *testing.T) {
	t.Parallel()
	sources, err := load(embedded)
	require.NoError(t, err)
	require.NotEmpty(t, sources)
	require.Equal(t, "0001_core", sources[0].name())
	for _, s := range sources {
		require.Contains(t, s.sql, placeholder, "%s should use %s for the schema", s.name(), placeholder)
	}
}

func TestLoadRejectsBadFiles(t *testing.T) {
	t.Parallel()
	file := &fstest.MapFile{Data: []byte("SELECT 1")}
	for name, fsys := range map[string]fstest.MapFS{
		"bad name":   {"sql/0001_Core.up.sql": file},
		"no number":  {"sql/core.up.sql": file},
		"duplicate":  {"sql/0001_a.up.sql": file, "sql/0001_b.up.sql": file},
		"duplicate2": {"sql/1_a.up.sql": file, "sql/1_b.up.sql": file},
		"empty":      {"sql/README": file},
	} {
		_, err := load(fsys)
		require.Error(t, err, name)
	}

	sources, err := load(fstest.MapFS{
		"sql/0002_b.up.sql":   file,
		"sql/0001_a.up.sql":   file,
		"sql/0001_a.down.sql": file,
	})
	require.NoError(t, err)
	require.Len(t, sources, 2)
	require.Equal(t, "0001_a", sources[0].name())
	require.Equal(t, "0002_b", sources[1].name())
}

func TestFailedMigrationIsNotMarkedApplied(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	db := pgtest.BunDB(t, pgtest.URL(t))
	ctx := t.Context()

	first := source{number: "0001", comment: "first", sql: "CREATE TABLE {{schema}}.a (id int);"}
	broken := source{number: "0002", comment: "second", sql: `
		CREATE TABLE {{schema}}.b (id int);
		SELECT no_such_function();`}
	applied, err := run(ctx, db, schema, nil, []source{first, broken})
	require.ErrorContains(t, err, "no_such_function")
	require.Equal(t, []string{"0001_first"}, applied)

	marked := func() []string {
		var names []string
		require.NoError(t, db.NewSelect().
			ColumnExpr("name").
			TableExpr(pgx.Identifier{schema, "bun_migrations"}.Sanitize()).
			OrderExpr("name").
			Scan(ctx, &names))
		return names
	}
	require.Equal(t, []string{"0001"}, marked())
	var exists bool
	require.NoError(t, db.QueryRowContext(ctx, "SELECT to_regclass(?) IS NOT NULL",
		pgx.Identifier{schema, "b"}.Sanitize()).Scan(&exists))
	require.False(t, exists, "the failed migration was rolled back")

	fixed := source{number: "0002", comment: "second", sql: `
		CREATE TABLE {{schema}}.b (id int);
		-- a ? in the SQL is not a placeholder:
		SELECT '{"k": 1}'::jsonb ? 'k';
		CREATE TABLE c (id int); -- unqualified: lands in the schema`}
	applied, err = run(ctx, db, schema, nil, []source{first, fixed})
	require.NoError(t, err)
	require.Equal(t, []string{"0002_second"}, applied)
	require.Equal(t, []string{"0001", "0002"}, marked())
	require.NoError(t, db.QueryRowContext(ctx, "SELECT to_regclass(?) IS NOT NULL",
		pgx.Identifier{schema, "c"}.Sanitize()).Scan(&exists))
	require.True(t, exists)
}

func TestQuotedSchemaName(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t) + `_Mixed "Case"`
	db := pgtest.BunDB(t, pgtest.URL(t))
	t.Cleanup(func() {
		_, err := db.ExecContext(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	})
	applied, err := Migrate(t.Context(), db, schema, nil)
	require.NoError(t, err)
	require.NotEmpty(t, applied)
	var n int
	require.NoError(t, db.QueryRowContext(t.Context(),
		"SELECT count(*) FROM pg_tables WHERE schemaname = ?", schema).Scan(&n))
	require.Greater(t, n, 3)
	require.True(t, strings.Contains(schema, `"`))
}
