package main

import (
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/migrations"
	"github.com/journey-go/journey/persistence"
)

// addFutureColumns adds a column to every table of schema, as a migration of a newer release
// would, once this release has migrated it.
func addFutureColumns(t *testing.T, url, schema string) {
	t.Helper()
	_, err := migrations.Migrate(t.Context(), pgtest.BunDB(t, url), schema, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	db := pgtest.DB(t)
	rows, err := db.QueryContext(t.Context(), `SELECT table_name FROM information_schema.tables
		WHERE table_schema = $1 AND table_type = 'BASE TABLE'`, schema)
	require.NoError(t, err)
	defer rows.Close()
	var tables []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		tables = append(tables, name)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, tables)
	for _, table := range tables {
		_, err := db.ExecContext(t.Context(), "ALTER TABLE "+pgx.Identifier{schema, table}.Sanitize()+
			" ADD COLUMN added_by_a_newer_release text")
		require.NoError(t, err)
	}
}

// A replica of this release keeps working on a schema that a newer release has migrated: a
// column it does not know reaches none of its reads, whether the runtime's (starts, sets,
// claims, completions, failures, waits, retries, archiving) or the CLI's.
func TestColumnsOfANewerReleaseBreakNothing(t *testing.T) {
	t.Parallel()
	b := setupOps(t, func(url, schema string) { addFutureColumns(t, url, schema) })
	ctx := t.Context()
	g := b.cfg.Graphs[0]

	keyed, err := b.rt.Start(ctx, g, journey.WithKey("order-1"), journey.WithValues(map[string]any{"order": "good"}))
	require.NoError(t, err)
	again, err := b.rt.Start(ctx, g, journey.WithKey("order-1"))
	require.NoError(t, err)
	require.True(t, again.Existing)
	found, err := b.rt.FindByKey(ctx, "shop", "order-1")
	require.NoError(t, err)
	require.Equal(t, keyed.ID, found.ID)
	many, err := b.rt.StartMany(ctx, g, []map[string]any{{"order": "a"}, nil})
	require.NoError(t, err)
	_, err = b.rt.Set(ctx, many[1].ID, "order", "b")
	require.NoError(t, err)
	for _, id := range []string{keyed.ID, many[0].ID, many[1].ID} {
		_, err := b.rt.Get(ctx, id, "receipt", journey.WaitAny())
		require.NoError(t, err)
	}
	_, err = b.rt.Computations(ctx, b.okID)
	require.NoError(t, err)
	_, err = b.rt.History(ctx, b.okID)
	require.NoError(t, err)
	_, err = b.rt.Summarize(ctx, b.failedID)
	require.NoError(t, err)
	listed, err := b.rt.List(ctx, journey.ListQuery{Graph: "shop"})
	require.NoError(t, err)
	require.Len(t, listed, 5)

	for _, args := range [][]string{
		{"graphs"}, {"executions", "list"}, {"executions", "show", b.failedID}, {"replicas"}, {"insights", "shop"},
	} {
		code, _, stderr := b.ops(t, args...)
		require.Equal(t, 0, code, "journey %v: %s", args, stderr)
	}
	// Requests, carried out by the runtime: an archive, an unarchive and a retry.
	for _, args := range [][]string{{"archive", b.okID}, {"unarchive", b.okID}} {
		code, _, stderr := b.ops(t, args...)
		require.Equal(t, 0, code, "journey %v: %s", args, stderr)
	}
	b.fixed.Store(true)
	code, _, stderr := b.ops(t, "retry", b.failedID, "charge")
	require.Equal(t, 0, code, stderr)
	v, err := b.rt.Get(ctx, b.failedID, "receipt", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, "receipt for charged bad", v.String())
	var d persistence.ExecutionDetail
	b.okJSON(t, &d, "executions", "show", b.failedID)
	require.NotEmpty(t, d.Requests)
}
