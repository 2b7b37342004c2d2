package persistence

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// prune deletes, oldest first and up to limit rows per table, what is older than retention and
// that no semantics need: the attempts that later attempts of their node replaced (the attempts
// table: the current attempt of each node, in its node row, decides what runs next and what Get
// reports), value history, and delivered notifications. Values, historians and notification
// claims are kept. The minutes of the executions whose attempts or history it deletes are marked
// for the roll of the insights, which count them. It returns how many rows it deleted, and
// whether it is behind: a table may hold more rows past their time than it deleted.
func (s *Store) prune(ctx context.Context, retention time.Duration, limit int) (deleted int, behind bool, err error) {
	now, err := s.now(ctx, s.db)
	if err != nil {
		return 0, false, err
	}
	cutoff := now.Add(-retention)
	// A value replaced says when the node had its first value, and an attempt how it ran:
	// insights count them (see rollSQL), so the minutes of their executions are marked.
	statements := []struct{ what, query, lanes string }{
		{"replaced attempts", `WITH gone AS (DELETE FROM {s}.attempts a USING (
				SELECT lane, execution_id, attempt_id FROM {s}.attempts WHERE finished_at < ?{pin}
				ORDER BY finished_at LIMIT ? FOR UPDATE SKIP LOCKED) d
				WHERE a.lane = d.lane AND a.execution_id = d.execution_id AND a.attempt_id = d.attempt_id
				RETURNING a.lane, a.execution_id),
			marked AS (` + markFrom(`SELECT e.graph_name, e.graph_version, date_trunc('minute', e.created_at) AS minute
				FROM gone JOIN {s}.executions e ON e.lane = gone.lane AND e.id = gone.execution_id`) + `)
			SELECT count(*) FROM gone`, `SELECT lane FROM {s}.attempts WHERE finished_at < ?`},
		{"value history", `WITH gone AS (DELETE FROM {s}.value_history h USING (
				SELECT lane, execution_id, hseq FROM {s}.value_history WHERE changed_at < ?{pin} ORDER BY changed_at LIMIT ?
				FOR UPDATE SKIP LOCKED) d
				WHERE h.lane = d.lane AND h.execution_id = d.execution_id AND h.hseq = d.hseq
				RETURNING h.lane, h.execution_id),
			marked AS (` + markFrom(`SELECT e.graph_name, e.graph_version, date_trunc('minute', e.created_at) AS minute
				FROM gone JOIN {s}.executions e ON e.lane = gone.lane AND e.id = gone.execution_id`) + `)
			SELECT count(*) FROM gone`, `SELECT lane FROM {s}.value_history WHERE changed_at < ?`},
		{"delivered notifications", `WITH gone AS (DELETE FROM {s}.notification_deliveries d USING (
				SELECT lane, id FROM {s}.notification_deliveries WHERE state = 'DELIVERED' AND delivered_at < ?{pin}
				ORDER BY delivered_at LIMIT ? FOR UPDATE SKIP LOCKED) o WHERE d.lane = o.lane AND d.id = o.id RETURNING d.id)
			SELECT count(*) FROM gone`, `SELECT lane FROM {s}.notification_deliveries WHERE state = 'DELIVERED' AND delivered_at < ?`},
	}
	// On Citus, a lane at a time: {pin} pins the rows to delete to the lane.
	for _, st := range statements {
		lanes, err := s.lanesWith(ctx, s.db, st.lanes, cutoff)
		if err != nil {
			return deleted, false, err
		}
		for _, lane := range lanes {
			var n int
			query := strings.ReplaceAll(st.query, "{pin}", lanePin("", lane))
			if err := s.db.NewRaw(s.q(query), cutoff, limit).Scan(ctx, &n); err != nil {
				return deleted, false, fmt.Errorf("pruning %s: %w", st.what, err)
			}
			deleted += n
			behind = behind || n == limit
		}
	}
	return deleted, behind, nil
}
