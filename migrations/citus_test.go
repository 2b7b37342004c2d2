package migrations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/migrations"
)

// On a database with Citus (make test-citus), Migrate distributes the per-execution tables by
// lane, co-located, and keeps a key unique in its lane; a second run changes nothing, and a
// table that a later release distributes is distributed by its first run. On one
// PostgreSQL, it distributes nothing, and the test has nothing to check.
func TestMigrateDistributesOnCitus(t *testing.T) {
	t.Parallel()
	db, schema := pgtest.BunDB(t, pgtest.URL(t)), pgtest.Schema(t)
	var citus bool
	require.NoError(t, db.NewRaw(`SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')`).Scan(t.Context(), &citus))
	if !citus {
		t.Skip("the database has no citus extension: make test-citus runs this test")
	}
	applied, err := migrations.Migrate(t.Context(), db, schema, testLogger(t))
	require.NoError(t, err)
	require.Contains(t, applied, "citus")

	var dist []struct {
		Table      string `bun:"table_name"`
		Column     string `bun:"column"`
		Colocation int    `bun:"colocationid"`
	}
	require.NoError(t, db.NewRaw(`SELECT c.relname AS table_name, column_to_column_name(p.logicalrelid, p.partkey) AS column,
			p.colocationid FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid
		WHERE c.relnamespace = to_regnamespace(?) ORDER BY 1`, schema).Scan(t.Context(), &dist))
	var names []string
	for _, d := range dist {
		names = append(names, d.Table)
		require.Equal(t, "lane", d.Column, d.Table)
		require.Equal(t, dist[0].Colocation, d.Colocation, "%s is co-located with the others", d.Table)
	}
	require.ElementsMatch(t, migrations.Distributed, names)

	var keyIndex string
	require.NoError(t, db.NewRaw(`SELECT pg_get_indexdef(to_regclass(?))`, schema+".executions_key_idx").Scan(t.Context(), &keyIndex))
	require.Contains(t, keyIndex, "(lane, key, graph_name)")

	again, err := migrations.Migrate(t.Context(), db, schema, testLogger(t))
	require.NoError(t, err)
	require.Empty(t, again, "a second run distributes nothing again")

	// A schema distributed by a release without map_progress in Distributed.
	require.NoError(t, db.NewRaw(`SELECT undistribute_table(?)`, schema+".map_progress").Scan(t.Context(), new(any)))
	upgraded, err := migrations.Migrate(t.Context(), db, schema, testLogger(t))
	require.NoError(t, err)
	require.Equal(t, []string{"citus"}, upgraded)
	var colocated bool
	require.NoError(t, db.NewRaw(`SELECT (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = to_regclass(?0))
			= (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = to_regclass(?1))`,
		schema+".map_progress", schema+".executions").Scan(t.Context(), &colocated))
	require.True(t, colocated, "map_progress is distributed with the executions")
}
