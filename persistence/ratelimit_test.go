package persistence

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
)

// A promotion of rate-limited attempts admits into each key's window what the window leaves room
// for, counting the attempts AVAILABLE, those claimed within the window, and those a later attempt
// replaced; and its statements read a few rows of nodes a key, not the 10,000 attempts that wait
// nor the 5,000 that started before the window.
func TestRatePromotionReadsWhatItPromotes(t *testing.T) {
	t.Parallel()
	const waiting = 5000 // on each of r0 and r1
	g := graph.MustNew("rate", "v1", []graph.Node{
		graph.Input("k"),
		graph.Compute("job", graph.Needs("k"), func(ctx context.Context, in graph.Values) (any, error) { return 1, nil },
			graph.RateLimit(3, time.Hour, graph.RateKey(func(v graph.Values) string { return v.String("k") }))),
	})
	b := setup(t, g)
	ctx := context.Background()
	now := b.clock.Now()
	// r0: 5,000 wait, 3 claimed 10 minutes ago: full. r1: 5,000 wait, 1 claimed 30 minutes ago, 1
	// AVAILABLE, 5,000 claimed 2 hours ago: room for 1. r2: 1 waits, 3 attempts replaced since
	// they were claimed 5 minutes ago: full. r3: 1 waits, 3 claimed 2 hours ago: room for 3.
	type group struct {
		prefix, key, state string
		n                  int
		claimedAgo         time.Duration // 0: never claimed
	}
	groups := []group{
		{"a-", "r0", StatePending, waiting, 0}, {"ac-", "r0", StateRunning, 3, 10 * time.Minute},
		{"b-", "r1", StatePending, waiting, 0}, {"bc-", "r1", StateSuccess, 1, 30 * time.Minute},
		{"bv-", "r1", StateAvailable, 1, 0}, {"bo-", "r1", StateSuccess, waiting, 2 * time.Hour},
		{"c-", "r2", StatePending, 1, 0}, {"cr-", "r2", StateSuccess, 1, 2 * time.Hour},
		{"d-", "r3", StatePending, 1, 0}, {"do-", "r3", StateSuccess, 3, 2 * time.Hour},
	}
	id := 0 // the attempts' ids
	for _, gr := range groups {
		var claimed *time.Time
		if gr.claimedAgo > 0 {
			at := now.Add(-gr.claimedAgo)
			claimed = &at
		}
		b.exec(t, `INSERT INTO {s}.executions (lane, id, graph_name, graph_version)
			SELECT 0, ? || g, 'rate', 'v1' FROM generate_series(1, ?) g`, gr.prefix, gr.n)
		b.exec(t, `INSERT INTO {s}.nodes (lane, execution_id, graph_key, node, rev, changed_at, attempt_id, state, attempt,
				max_attempts, run_at, claimed_at, abandon_after_ms, heartbeat_timeout_ms, created_at, rate_key)
			SELECT 0, ? || g, 'rate@v1', 'job', 1, ?::timestamptz, ? + g, ?, 1, 2,
				?::timestamptz - interval '1 hour' + g * interval '1 ms', ?::timestamptz, 60000, 30000, ?::timestamptz, ?
			FROM generate_series(1, ?) g`, gr.prefix, now, id, gr.state, now, claimed, now, gr.key, gr.n)
		id += gr.n
	}
	// r2's attempts that later ones replaced, claimed within the window.
	b.exec(t, `INSERT INTO {s}.attempts (lane, execution_id, node, graph_key, attempt_id, state, attempt, max_attempts,
			run_at, claimed_at, abandon_after_ms, heartbeat_timeout_ms, computed_with, created_at, rate_key)
		SELECT 0, 'cr-1', 'job', 'rate@v1', -g, 'FAILED', g, 5, ?::timestamptz, ?::timestamptz, 60000, 30000, '{}', ?::timestamptz, 'r2'
		FROM generate_series(1, 3) g`, now, now.Add(-5*time.Minute), now)
	b.exec(t, `ANALYZE {s}.executions, {s}.nodes, {s}.attempts`)

	s, log, explainer := b.tracedStore(t)
	promoted, err := s.PromoteDue(ctx)
	require.NoError(t, err)
	var available []string
	require.NoError(t, b.db.NewRaw(b.store.q(`SELECT execution_id FROM {s}.nodes WHERE state = 'AVAILABLE'
		ORDER BY execution_id`)).Scan(ctx, &available))
	require.Equal(t, []string{"b-1", "bv-1", "d-1"}, available,
		"the oldest of r1, which had room for one, and r3's; none of the full r0 and r2")
	require.Equal(t, 2, promoted)
	wake, ok := s.RateWake()
	require.True(t, ok, "full windows wait for time")
	require.InDelta(t, 30*time.Minute, wake, float64(time.Second),
		"r1, which the promotion filled, has room again when its claim of 30 minutes ago leaves the window, before r0's of 10")

	statements := log.take()
	require.NotEmpty(t, statements)
	for _, conn := range []*pgx.Conn{explainer, planner(t, PlanSettings)} {
		for _, st := range statements {
			raw, plan := explainAnalyze(ctx, t, conn, st)
			read := plan.rowsRead("nodes") + plan.rowsRead("attempts")
			t.Logf("%.0f rows read: %.160s", read, oneLine(st.sql))
			require.LessOrEqual(t, read, 100.0, "a statement of the promotion reads what waits:\n%s\n%s", st.sql, raw)
		}
	}
}
