package journey_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// orderGraph is graph "shop_order" at version: ten nodes, with a ship gated on pay, and the
// extra nodes.
func orderGraph(version string, ship graph.Gate, extra ...graph.Node) *graph.Graph {
	echo := func(ctx context.Context, in graph.Values) (any, error) { return "ok", nil }
	return graph.MustNew("shop_order", version, append([]graph.Node{
		graph.Input("order"), graph.Input("address"),
		graph.Compute("price", graph.Needs("order"), echo),
		graph.Compute("tax", graph.Needs("price", "address"), echo),
		graph.Compute("pay", graph.Needs("price", "tax"), echo),
		graph.Compute("pack", graph.Needs("order"), echo),
		graph.Compute("ship", ship, echo),
		graph.Compute("notify", graph.Needs("ship"), echo),
		graph.Historian("log", graph.Needs("pay", "ship")),
		graph.Archive("done", graph.Needs("notify")),
	}, extra...))
}

// The reviewer's case: replica A serves shop_order v1, and an execution has finished there;
// replica B starts with a node added and a gate changed, still v1. New refuses B, says what
// changed and what to do, and writes nothing; under v2, B starts.
func TestNewRefusesAGraphChangedUnderItsVersion(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	v1 := orderGraph("v1", graph.Needs("pay"))
	cfg := testConfig(t, v1)
	cfg.ReplicaID = "replica-a"
	a := newRuntime(t, cfg)
	e, err := a.Start(ctx, v1, journey.WithValues(map[string]any{"order": 1, "address": "x"}))
	require.NoError(t, err)
	_, err = a.Get(ctx, e.ID, "done", journey.WaitAny())
	require.NoError(t, err)

	count := func(query string) int {
		t.Helper()
		var n int
		require.NoError(t, pgtest.DB(t).QueryRowContext(ctx, query).Scan(&n))
		return n
	}
	schema := pgx.Identifier{cfg.Schema}.Sanitize()
	refund := graph.Compute("refund", graph.Needs("pay"), func(ctx context.Context, in graph.Values) (any, error) { return nil, nil })
	changed := orderGraph("v1", graph.Needs("pay", "pack"), refund)
	cfg.Graphs, cfg.ReplicaID = []*graph.Graph{changed}, "replica-b"
	_, err = journey.New(ctx, cfg)
	require.Error(t, err)
	require.True(t, errors.Is(err, journey.ErrGraphChanged), "%v", err)
	for _, want := range []string{`graph "shop_order" version "v1"`, `node "refund" is new`,
		`node "ship": gate needs(pay) → needs(pay, pack)`, `such as "v2"`, "`journey graphs move shop_order v1 v2`"} {
		require.ErrorContains(t, err, want)
	}
	require.Zero(t, count(`SELECT count(*) FROM `+schema+`.replica_heartbeats WHERE replica_id = 'replica-b'`),
		"a refused replica leaves no heartbeat")
	require.Zero(t, count(`SELECT count(*) FROM `+schema+`.graph_versions, jsonb_array_elements(nodes) n WHERE n->>'name' = 'refund'`),
		"nor its nodes")

	cfg.Graphs = []*graph.Graph{orderGraph("v2", graph.Needs("pay", "pack"), refund)}
	newRuntime(t, cfg)
	require.Equal(t, 1, count(`SELECT count(*) FROM `+schema+`.replica_heartbeats WHERE replica_id = 'replica-b'`))
}
