package migrations_test

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/migrations"
	"github.com/journey-go/journey/migrations/testdata/fixture"
)

// fixtureFile is what testdata/fixturegen wrote: the rows of a schema that an earlier release's
// runtime wrote, and what that runtime answered for its executions.
type fixtureFile struct {
	Migrations []string
	Rows       map[string]json.RawMessage
	Answers    map[string]struct {
		Values       json.RawMessage
		History      json.RawMessage
		Computations json.RawMessage
	}
}

// A schema populated by an earlier release, migrated forward, answers Get, History and
// Computations for every execution exactly as that release did; and its executions go on.
func TestMigrateForwardKeepsAnswers(t *testing.T) {
	t.Parallel()
	for _, release := range []string{"release-c30bda2"} {
		t.Run(release, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			raw, err := os.ReadFile(filepath.Join("testdata", release, "fixture.json"))
			require.NoError(t, err)
			var fx fixtureFile
			require.NoError(t, json.Unmarshal(raw, &fx))
			url, schema := pgtest.URL(t), pgtest.Schema(t)
			db := pgtest.BunDB(t, url)
			applied, err := migrations.MigrateThrough(ctx, db, schema, fx.Migrations[len(fx.Migrations)-1], testLogger(t))
			require.NoError(t, err)
			require.Len(t, applied, len(fx.Migrations))
			loadRows(t, db.DB, schema, fx.Rows)

			rt, err := journey.New(ctx, journey.Config{DatabaseURL: url, Schema: schema,
				Graphs: []*graph.Graph{fixture.Graph}, Logger: testLogger(t)})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, rt.Stop(context.Background())) })
			asJSON := func(v any, err error) string {
				t.Helper()
				require.NoError(t, err)
				b, err := json.Marshal(v)
				require.NoError(t, err)
				return string(b)
			}
			var replaced string
			for id, want := range fx.Answers {
				require.JSONEq(t, string(want.Values), asJSON(rt.Values(ctx, id)), "values of %s", id)
				require.JSONEq(t, string(want.History), asJSON(rt.History(ctx, id)), "history of %s", id)
				require.JSONEq(t, string(want.Computations), asJSON(rt.Computations(ctx, id)), "computations of %s", id)
				var h []journey.HistoryEntry
				require.NoError(t, json.Unmarshal(want.History, &h))
				if len(h) > 0 && string(h[len(h)-1].Value) == "null" { // the execution whose x was cleared
					replaced = id
				}
			}
			require.NotEmpty(t, replaced)

			// Its x set again, the execution computes on, and its history goes on after what it was.
			rev, err := rt.Set(ctx, replaced, "x", 5)
			require.NoError(t, err)
			z, err := rt.Get(ctx, replaced, "z", journey.WaitNewerThan(rev))
			require.NoError(t, err)
			require.Equal(t, int64(12), z.Int())
			history, err := rt.History(ctx, replaced)
			require.NoError(t, err)
			var before []journey.HistoryEntry
			require.NoError(t, json.Unmarshal(fx.Answers[replaced].History, &before))
			require.Len(t, history, len(before)+3)
			require.JSONEq(t, string(fx.Answers[replaced].History), asJSON(history[:len(before)], nil))
			for i, node := range []string{"x", "y", "z"} {
				require.Equal(t, node, history[len(before)+i].Node)
			}
		})
	}
}

// rank puts executions first, for the tables whose rows refer to them.
func rank(table string) int {
	if table == "executions" {
		return 0
	}
	return 1
}

// loadRows inserts the rows of each table, executions first, and moves the sequences past them.
func loadRows(t *testing.T, db *sql.DB, schema string, rows map[string]json.RawMessage) {
	t.Helper()
	tables := slices.SortedFunc(maps.Keys(rows), func(a, b string) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b))
	})
	for _, table := range tables {
		name := pgx.Identifier{schema, table}.Sanitize()
		_, err := db.ExecContext(t.Context(), "INSERT INTO "+name+" SELECT * FROM json_populate_recordset(NULL::"+name+", $1)",
			string(rows[table]))
		require.NoError(t, err, table)
		var seq sql.NullString
		err = db.QueryRowContext(t.Context(), `SELECT pg_get_serial_sequence($1, column_name) FROM information_schema.columns
			WHERE table_schema = $2 AND table_name = $3 AND column_name = 'id'`, name, schema, table).Scan(&seq)
		if !errors.Is(err, sql.ErrNoRows) {
			require.NoError(t, err, table)
		}
		if seq.Valid {
			_, err = db.ExecContext(t.Context(), "SELECT setval($1, max(id)) FROM "+name+" HAVING count(*) > 0", seq.String)
			require.NoError(t, err, table)
		}
	}
}
