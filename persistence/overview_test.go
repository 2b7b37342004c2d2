package persistence

import (
	"context"
	"testing"
	"time"

	"github.com/journey-go/journey/internal/pgtest"
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
	b.exec(t, `INSERT INTO {s}.notification_claims (lane, execution_id, event, phase, idempotency_key, claimed_at)
		VALUES (?, ?, 'execution.failed', 0, 'k1', now())`, LaneOf(failedID), failedID)
	b.exec(t, `INSERT INTO {s}.notification_deliveries (lane, idempotency_key, target, state, attempts, next_attempt_at, created_at)
		VALUES (?, 'k1', 'handler', 'DEAD', 5, now(), now())`, LaneOf(failedID))
	// An attempt reclaimed, with its reason, and replaced by the next.
	b.exec(t, `INSERT INTO {s}.attempts (lane, execution_id, node, graph_key, attempt_id, state, attempt, max_attempts,
			replica_id, run_at, claimed_at, abandon_after_ms, heartbeat_timeout_ms, computed_with, created_at, finished_at, error)
		SELECT lane, execution_id, node, graph_key, attempt_id, 'ABANDONED', attempt, max_attempts, replica_id, run_at,
			claimed_at, abandon_after_ms, heartbeat_timeout_ms, computed_with, created_at, now(), 'replica-a stopped heartbeating'
		FROM {s}.nodes WHERE lane = ? AND execution_id = ? AND node = ?`, running.Lane, running.ExecutionID, running.Node)
	b.exec(t, `UPDATE {s}.nodes SET attempt_id = attempt_id + 1, attempt = 2, replica_id = 'replica-b', claimed_at = now()
		WHERE lane = ? AND execution_id = ? AND node = ?`, running.Lane, running.ExecutionID, running.Node)

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

	if pgtest.Citus(t) {
		return // the workers count exactly there, whatever the size (see Overview)
	}
	// Past exactBelow rows, the totals are the planner's estimates; the small states stay exact.
	b.exec(t, `INSERT INTO {s}.executions (lane, id, graph_name, graph_version, archived_at)
		SELECT 0, 'BULK' || i, ?, 'v1', CASE WHEN i % 10 = 0 THEN now() END FROM generate_series(1, ?) i`,
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
