package persistence

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOverviewCountsOnIndexesAndEstimatesLargeTotals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.store.RecordGraphs(ctx, "replica-a", testIdentity, time.Minute))
	ids := b.ready(t, 3)
	running := b.claimOne(t, "replica-a")
	var failedID string
	for _, id := range ids {
		if id != running.ExecutionID {
			failedID = id
			break
		}
	}
	// A failure claimed now, and a delivery of it given up.
	b.exec(t, `INSERT INTO {s}.notification_claims (execution_id, event, phase, idempotency_key, claimed_at)
		VALUES (?, 'execution.failed', 0, 'k1', now())`, failedID)
	b.exec(t, `INSERT INTO {s}.notification_deliveries (idempotency_key, target, state, attempts, next_attempt_at, created_at)
		VALUES ('k1', 'handler', 'DEAD', 5, now(), now())`)
	// An attempt reclaimed, with its reason.
	b.exec(t, `UPDATE {s}.computations SET state = 'ABANDONED', finished_at = now(), error = 'replica-a stopped heartbeating'
		WHERE id = ?`, running.ID)
	b.exec(t, `INSERT INTO {s}.computations (execution_id, graph_key, node, state, attempt, max_attempts, replica_id,
			claimed_at, abandon_after_ms, heartbeat_timeout_ms)
		SELECT execution_id, graph_key, node, 'RUNNING', 2, max_attempts, 'replica-b', now(), abandon_after_ms, heartbeat_timeout_ms
		FROM {s}.computations WHERE id = ?`, running.ID)

	o, err := b.store.Overview(ctx)
	require.NoError(t, err)
	require.False(t, o.Estimated)
	require.Equal(t, map[string]int64{StatePending: 0, StateAvailable: 2, StateRunning: 1}, o.Computations)
	require.EqualValues(t, 1, o.FailedLastHour)
	require.EqualValues(t, 1, o.DeadDeliveries)
	require.Len(t, o.Graphs, 1)
	require.EqualValues(t, 3, o.Graphs[0].Executions)
	require.Equal(t, map[string]int64{ExecArchived: 0, ExecFailed: 1, ExecRunning: 1, ExecWaiting: 1}, o.Graphs[0].States)

	reclaims, err := b.store.Reclaims(ctx, 10)
	require.NoError(t, err)
	require.Len(t, reclaims, 1)
	require.Equal(t, "replica-a stopped heartbeating", *reclaims[0].Reason)
	require.True(t, reclaims[0].Retried)

	// Past exactBelow rows, the totals are the planner's estimates; the small states stay exact.
	b.exec(t, `INSERT INTO {s}.executions (id, graph_name, graph_version, archived_at)
		SELECT 'BULK' || i, ?, 'v1', CASE WHEN i % 10 = 0 THEN now() END FROM generate_series(1, ?) i`,
		b.g.Name(), exactBelow)
	b.exec(t, `ANALYZE {s}.executions`)
	o, err = b.store.Overview(ctx)
	require.NoError(t, err)
	require.True(t, o.Estimated)
	require.InEpsilon(t, exactBelow+3, o.Graphs[0].Executions, 0.1)
	require.InEpsilon(t, exactBelow/10, o.Graphs[0].States[ExecArchived], 0.2)
	require.Equal(t, map[string]int64{ExecArchived: o.Graphs[0].States[ExecArchived], ExecFailed: 1, ExecRunning: 1, ExecWaiting: 1},
		o.Graphs[0].States)
}
