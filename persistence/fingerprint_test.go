package persistence

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
)

// shopGraph is graph "shop" at version, with a charge of maxAttempts attempts, and the extra
// nodes.
func shopGraph(version string, maxAttempts int, extra ...graph.Node) *graph.Graph {
	noop := func(context.Context, graph.Values) (any, error) { return nil, nil }
	return graph.MustNew("shop", version, append([]graph.Node{
		graph.Input("order"),
		graph.Compute("charge", graph.Needs("order"), noop, graph.MaxAttempts(maxAttempts)),
		graph.Compute("ship", graph.Needs("charge"), noop),
	}, extra...))
}

// refundedShop is shopGraph changed under its version: a node added, an option changed.
func refundedShop(version string) *graph.Graph {
	return shopGraph(version, 5, graph.Compute("refund", graph.Needs("charge"),
		func(context.Context, graph.Values) (any, error) { return nil, nil }))
}

// snapshot returns the rows of the tables that RecordGraphs writes, as JSON.
func (b *bundle) snapshot(t *testing.T) string {
	t.Helper()
	var out string
	require.NoError(t, b.db.NewRaw(b.store.q(`SELECT json_build_array(
		(SELECT json_agg(f ORDER BY graph_name, graph_version) FROM {s}.graph_fingerprints f),
		(SELECT json_agg(v ORDER BY graph_name, graph_version) FROM {s}.graph_versions v),
		(SELECT json_agg(r ORDER BY replica_id) FROM {s}.replica_heartbeats r))::text`)).Scan(context.Background(), &out))
	return out
}

// recordedFingerprint returns the fingerprint recorded for graph "shop" at version.
func (b *bundle) recordedFingerprint(t *testing.T, version string) string {
	t.Helper()
	var fp string
	require.NoError(t, b.db.NewRaw(b.store.q(`SELECT fingerprint FROM {s}.graph_fingerprints
		WHERE graph_name = 'shop' AND graph_version = ?`), version).Scan(context.Background(), &fp))
	return fp
}

// A graph changed under a recorded version is refused, saying what changed and how to fix it,
// and changes nothing, while an execution of the version exists or a live replica serves it.
// Otherwise the changed graph takes the version over, with a warning that names the changes.
func TestRecordGraphsKeepsTheRecordedDefinitionWhileItIsUsed(t *testing.T) {
	t.Parallel()
	const staleAfter = time.Minute
	for _, tc := range []struct {
		name    string
		arrange func(t *testing.T, b *bundle)
		replica string // the replica that serves the changed graph
		refused string // what the refusal says keeps the recorded definition; "" if it takes over
	}{
		{name: "a live replica serves it", replica: "replica-b", refused: "(live replicas serve it: replica-a)"},
		{name: "an archived execution", replica: "replica-b", refused: "(executions of it exist)",
			arrange: func(t *testing.T, b *bundle) {
				t.Helper()
				_, err := b.store.CreateExecution(context.Background(), b.g)
				require.NoError(t, err)
				b.exec(t, `UPDATE {s}.executions SET archived_at = now()`)
				require.NoError(t, b.store.DeleteReplica(context.Background(), "replica-a", testIdentity.Incarnation))
			}},
		{name: "both", replica: "replica-b", refused: "(executions of it exist; live replicas serve it: replica-a)",
			arrange: func(t *testing.T, b *bundle) {
				t.Helper()
				_, err := b.store.CreateExecution(context.Background(), b.g)
				require.NoError(t, err)
			}},
		{name: "its replica stopped", replica: "replica-b",
			arrange: func(t *testing.T, b *bundle) {
				t.Helper()
				require.NoError(t, b.store.DeleteReplica(context.Background(), "replica-a", testIdentity.Incarnation))
			}},
		{name: "its replica went stale", replica: "replica-b",
			arrange: func(_ *testing.T, b *bundle) { b.clock.Advance(2 * staleAfter) }},
		{name: "its replica restarted with the change", replica: "replica-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, shopGraph("v1", 3))
			require.NoError(t, b.store.RecordGraphs(ctx, "replica-a", testIdentity, staleAfter))
			if tc.arrange != nil {
				tc.arrange(t, b)
			}
			changed := b.newStore(t, Config{Graphs: []*graph.Graph{refundedShop("v1")}})
			var logs bytes.Buffer
			changed.logger = slog.New(slog.NewTextHandler(&logs, nil))
			before := b.snapshot(t)

			err := changed.RecordGraphs(ctx, tc.replica, testIdentity, staleAfter)
			if tc.refused != "" {
				require.ErrorIs(t, err, ErrGraphChanged)
				require.EqualError(t, err, `journey: graph changed: graph "shop" version "v1" is recorded with another definition `+
					`(fingerprint `+b.g.Fingerprint()[:12]+`, this replica's `+refundedShop("v1").Fingerprint()[:12]+`): `+
					`node "charge": MaxAttempts 3 → 5; node "refund" is new. The recorded definition stays while an execution `+
					`of the version exists or a live replica serves it `+tc.refused+`. Give this graph a new version, such as "v2"; `+
					"the executions of \"v1\" can then be moved to it with `journey graphs move shop v1 v2` (Runtime.MoveVersion) "+
					"if the versions are compatible")
				require.Equal(t, before, b.snapshot(t), "a refusal changes nothing")
				require.NoError(t, b.newStore(t, Config{Graphs: []*graph.Graph{refundedShop("v2")}}).RecordGraphs(ctx, tc.replica, testIdentity, staleAfter),
					"under a new version, it is recorded")
				return
			}
			require.NoError(t, err)
			require.Equal(t, refundedShop("v1").Fingerprint(), b.recordedFingerprint(t, "v1"))
			gv, err := b.store.LoadGraphVersion(ctx, "shop", "v1")
			require.NoError(t, err)
			_, ok := gv.Node("refund")
			require.True(t, ok, "the recorded nodes are the new definition's")
			require.Contains(t, logs.String(), `level=WARN`)
			require.Contains(t, logs.String(), `graph=shop version=v1 changes="node \"charge\": MaxAttempts 3 → 5; node \"refund\" is new"`)
			// The old definition is now the one refused, by the rule that kept it.
			err = b.store.RecordGraphs(ctx, "replica-c", testIdentity, staleAfter)
			require.ErrorIs(t, err, ErrGraphChanged)
			require.ErrorContains(t, err, `node "charge": MaxAttempts 5 → 3; node "refund" is removed`)
		})
	}
}

// A version that an earlier release recorded has no fingerprint: the first replica that records
// one adopts its own graph's, executions or not; an earlier release's replica that upserts the
// version afterwards, with its statement of the time, leaves the fingerprint as it is.
func TestRecordGraphsAdoptsVersionsOfEarlierReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, shopGraph("v1", 3))
	// What the previous release's RecordGraphs ran, for another graph under the version.
	earlier := func() {
		b.exec(t, `INSERT INTO {s}.graph_versions AS v (graph_name, graph_version, nodes, mermaid, first_seen_at, last_seen_at)
			SELECT g.name, g.version, g.nodes::jsonb, g.mermaid, now(), now()
			FROM unnest(ARRAY['shop'], ARRAY['v1'], ARRAY['[{"name": "order", "kind": "input"}]'], ARRAY['flowchart TD']) AS g(name, version, nodes, mermaid)
			ON CONFLICT (graph_name, graph_version) DO UPDATE
			SET last_seen_at = excluded.last_seen_at, nodes = excluded.nodes, mermaid = excluded.mermaid`)
	}
	earlier()
	_, err := b.store.CreateExecution(ctx, b.g)
	require.NoError(t, err)

	require.NoError(t, b.store.RecordGraphs(ctx, "replica-a", testIdentity, time.Minute))
	require.Equal(t, b.g.Fingerprint(), b.recordedFingerprint(t, "v1"))
	earlier()
	require.Equal(t, b.g.Fingerprint(), b.recordedFingerprint(t, "v1"))
	err = b.newStore(t, Config{Graphs: []*graph.Graph{refundedShop("v1")}}).RecordGraphs(ctx, "replica-b", testIdentity, time.Minute)
	require.ErrorIs(t, err, ErrGraphChanged)
}

// Replicas that start at once under one version: with the same graph, both are recorded; with
// different graphs, exactly one is, and the other is refused. Each waits on the fingerprint's
// row, which the test holds until both do: a new version's row (an insert not yet committed), or
// the row of a version recorded before, that nothing holds any more.
func TestRecordGraphsAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		recorded bool // the version is recorded, and its replica stopped
		same     bool
	}{
		{name: "new version, same graph", same: true},
		{name: "new version, different graphs"},
		{name: "recorded version, same graph", recorded: true, same: true},
		{name: "recorded version, different graphs", recorded: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, shopGraph("v1", 3))
			if tc.recorded {
				require.NoError(t, b.store.RecordGraphs(ctx, "replica-0", testIdentity, time.Minute))
				require.NoError(t, b.store.DeleteReplica(ctx, "replica-0", testIdentity.Incarnation))
			}
			hold, err := b.db.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer func() { _ = hold.Rollback() }()
			if tc.recorded {
				_, err = hold.NewRaw(b.store.q(`SELECT 1 FROM {s}.graph_fingerprints FOR UPDATE`)).Exec(ctx)
			} else {
				_, err = hold.NewRaw(b.store.q(`INSERT INTO {s}.graph_fingerprints (graph_name, graph_version, fingerprint, description, recorded_at)
					VALUES ('shop', 'v1', 'held', '{}', now())`)).Exec(ctx)
			}
			require.NoError(t, err)

			graphs := []*graph.Graph{shopGraph("v1", 3), refundedShop("v1")}
			if tc.same {
				graphs[1] = shopGraph("v1", 3)
			}
			errs := make(chan error, len(graphs))
			for i, g := range graphs {
				s := b.newStore(t, Config{Graphs: []*graph.Graph{g}})
				go func() { errs <- s.RecordGraphs(ctx, []string{"replica-a", "replica-b"}[i], testIdentity, time.Minute) }()
			}
			waitFor(t, "both replicas to wait for the fingerprint's row", func() bool {
				var waiting int
				require.NoError(t, b.db.NewRaw(`SELECT count(*) FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND query LIKE '%' || ? || '.graph_fingerprints%'`, b.store.quoted).Scan(ctx, &waiting))
				return waiting == 2
			})
			require.NoError(t, hold.Rollback())

			var refused []error
			for range graphs {
				if err := <-errs; err != nil {
					refused = append(refused, err)
				}
			}
			if tc.same {
				require.Empty(t, refused)
				require.Equal(t, graphs[0].Fingerprint(), b.recordedFingerprint(t, "v1"))
				return
			}
			require.Len(t, refused, 1, "exactly one replica is refused")
			require.ErrorIs(t, refused[0], ErrGraphChanged)
			require.ErrorContains(t, refused[0], "(live replicas serve it: replica-")
			var winner string
			require.NoError(t, b.db.NewRaw(b.store.q(`SELECT replica_id FROM {s}.replica_heartbeats`)).Scan(ctx, &winner))
			want := map[string]string{"replica-a": graphs[0].Fingerprint(), "replica-b": graphs[1].Fingerprint()}[winner]
			require.Equal(t, want, b.recordedFingerprint(t, "v1"), "the recorded definition is the winner's")
		})
	}
}

func TestNextVersion(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]string{"v1": "v2", "v09": "v10", "2024.9": "2024.10", "7": "8", "beta": "beta-2",
		"v99999999999999999999": "v99999999999999999999-2"} {
		require.Equal(t, want, nextVersion(v), v)
	}
}
