package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/journeyui"
	"github.com/journey-go/journey/persistence"
)

// A deploy that stops the last replica of a version strands the work left on it: journey graphs
// flags it, with since when, and journey graphs move takes it to a compatible version, whose
// replicas run it; it refuses an incompatible version, or one still served, and changes nothing.
func TestStrandedVersionMovesToACompatibleOne(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	ctx := t.Context()
	cfg := journey.Config{DatabaseURL: url, Schema: schema, PollInterval: 100 * time.Millisecond,
		SweepInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	v1 := shopGraph(new(atomic.Bool), new(atomic.Int64))

	// v1's replica finishes one execution, starts another with no input, and stops.
	cfg.Graphs, cfg.ReplicaID = []*graph.Graph{v1}, "replica-v1"
	old, err := journey.New(ctx, cfg)
	require.NoError(t, err)
	done, err := old.Start(ctx, v1, journey.WithValues(map[string]any{"order": "good"}))
	require.NoError(t, err)
	_, err = old.Get(ctx, done.ID, "receipt", journey.WaitAny())
	require.NoError(t, err)
	left, err := old.Start(ctx, v1)
	require.NoError(t, err)
	require.NoError(t, old.Stop(ctx))
	// Its input is set afterwards, by a write that no replica serving v1 takes up.
	store, err := persistence.New(persistence.Config{DB: pgtest.BunDB(t, url), Schema: schema, Graphs: []*graph.Graph{v1}})
	require.NoError(t, err)
	require.NoError(t, store.ReadLayout(ctx))
	_, err = store.SetValues(ctx, left.ID, map[string]json.RawMessage{"order": json.RawMessage(`"later"`)}, nil, nil)
	require.NoError(t, err)

	summary := func(version string) persistence.GraphSummary {
		t.Helper()
		code, stdout, stderr := runAs(t, url, "graphs", "-schema", schema, "-json")
		require.Equal(t, 0, code, stderr)
		var graphs []persistence.GraphSummary
		require.NoError(t, json.Unmarshal([]byte(stdout), &graphs))
		for _, g := range graphs {
			if g.Version == version {
				return g
			}
		}
		t.Fatalf("no version %q in %s", version, stdout)
		return persistence.GraphSummary{}
	}
	g := summary("v1")
	require.Zero(t, g.ServingReplicas)
	require.EqualValues(t, 1, g.Waiting)
	require.True(t, g.Stranded)
	require.NotNil(t, g.UnservedSince)
	code, stdout, _ := runAs(t, url, "graphs", "-schema", schema)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "STRANDED: 1 waiting")
	require.Contains(t, dashboard(t, pgtest.DB(t), schema, "/"), "stranded: 1 with work left")
	stranded, err := store.Stranded(ctx)
	require.NoError(t, err)
	require.Equal(t, []persistence.StrandedVersion{{Key: "shop@v1", Executions: 1}}, stranded)

	// v2 keeps every node and adds one; "lean" drops one, and a replica still serves it.
	v2 := graph.MustNew("shop", "v2", append(v1.Nodes(), graph.Compute("thanks", graph.Needs("receipt"),
		func(ctx context.Context, in graph.Values) (any, error) {
			return "thanks for " + in.String("order"), nil
		})))
	lean := graph.MustNew("shop", "lean", []graph.Node{graph.Input("order")})
	cfg.Graphs, cfg.ReplicaID = []*graph.Graph{v2, lean}, "replica-v2"
	current := startRuntime(t, cfg)

	for _, tc := range []struct{ from, to, want string }{
		{"v1", "lean", `cannot move from version "v1" to "lean": node "charge" is not in version "lean"; node "receipt" is not in version "lean"`},
		{"lean", "v1", `graph "shop" version "lean" is still served by replica(s) replica-v2`},
		{"v1", "v9", `no replica has recorded graph "shop" version "v9"`},
	} {
		code, _, stderr := runAs(t, url, "graphs", "move", "shop", tc.from, tc.to, "-schema", schema)
		require.Equal(t, 1, code, "%s → %s", tc.from, tc.to)
		require.Contains(t, stderr, tc.want)
	}
	require.True(t, summary("v1").Stranded, "a refused move changes nothing")

	code, stdout, stderr := runAs(t, url, "graphs", "move", "shop", "v1", "v2", "-schema", schema)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `moved 2 execution(s) of graph "shop" from version "v1" to "v2"`)
	for id, want := range map[string]string{left.ID: "thanks for later", done.ID: "thanks for good"} {
		v, err := current.Get(ctx, id, "thanks", journey.WaitAny())
		require.NoError(t, err)
		require.Equal(t, want, v.String(), "v2's replica runs the work left, and the node v2 adds")
	}
	require.False(t, summary("v1").Stranded)
	require.Zero(t, summary("v1").Waiting)
}

// dashboard returns the body of the dashboard's page at path, on db's schema, and requires a 200.
func dashboard(t *testing.T, db *sql.DB, schema, path string) string {
	t.Helper()
	h, err := journeyui.Handler(t.Context(), journeyui.Options{DB: db, Schema: schema})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	return string(body)
}
