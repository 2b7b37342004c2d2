package main

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// A role given only what `journey migrate -grant` grants runs a replica (whose New migrates
// nothing on the up-to-date schema), the CLI's read commands and the dashboard. It can create
// nothing in the schema.
func TestLeastPrivilegeRole(t *testing.T) {
	t.Parallel()
	owner, schema := pgtest.URL(t), pgtest.Schema(t)
	role := "jt_runtime_" + strings.ToLower(rand.Text()[:8])
	db := pgtest.DB(t)
	_, err := db.ExecContext(t.Context(), "CREATE ROLE "+role+" LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() { // before the schema's drop: DROP OWNED revokes the role's grants
		_, err := db.ExecContext(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role)
		assert.NoError(t, err)
	})
	u, err := url.Parse(owner)
	require.NoError(t, err)
	u.User = url.User(role)
	asRole := u.String()

	code, _, stderr := runAs(t, owner, "migrate", "-schema", schema, "-grant", "jt_no_such_role")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `role "jt_no_such_role" does not exist`)
	code, stdout, stderr := runAs(t, owner, "migrate", "-schema", schema, "-grant", role)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "granted role "+role)

	var create bool
	require.NoError(t, db.QueryRowContext(t.Context(), "SELECT has_schema_privilege($1, $2, 'CREATE')", role, schema).Scan(&create))
	require.False(t, create, "the runtime role cannot create in the schema")

	g := shopGraph(new(atomic.Bool), new(atomic.Int64))
	rt := startRuntime(t, journey.Config{DatabaseURL: asRole, Schema: schema, Graphs: []*graph.Graph{g},
		ReplicaID: "least-privilege", PollInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ex, err := rt.Start(t.Context(), g, journey.WithValues(map[string]any{"order": "good"}))
	require.NoError(t, err)
	v, err := rt.Get(t.Context(), ex.ID, "receipt", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, "receipt for charged good", v.String())

	for _, args := range [][]string{{"graphs"}, {"executions", "list"}, {"executions", "show", ex.ID}, {"replicas"}} {
		code, stdout, stderr := runAs(t, asRole, append(args, "-schema", schema)...)
		require.Equal(t, 0, code, "%v: %s", args, stderr)
		require.NotEmpty(t, stdout, "%v", args)
	}

	cfg, err := pgx.ParseConfig(asRole)
	require.NoError(t, err)
	uiDB := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = uiDB.Close() })
	for _, path := range []string{"/", "/executions", "/executions/" + ex.ID, "/replicas"} {
		dashboard(t, uiDB, schema, path)
	}
}
