package persistence

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// pruneScanFactor bounds the finished attempts that one pass examines: Limit times this many.
const pruneScanFactor = 10

// pruneCursor is where the last pass stopped in the finished attempts, in (finished_at, id)
// order. An attempt that is the newest of its node is kept, so without a cursor every pass
// would examine all of those again, oldest first: in a database a year old, nearly every
// attempt. A pass goes on from the cursor, and starts again from the oldest once it reaches
// the retention cutoff, so an attempt superseded later (by a Retry) is found on the next round.
type pruneCursor struct {
	mu sync.Mutex
	at time.Time
	id int64
}

// prune deletes, oldest first and up to limit rows per table, what is older than retention and
// that no semantics need: finished attempts that are not the newest of their node (the newest
// decides what runs next, and what Get reports), value history, and delivered notifications.
// Values, historians and notification claims are kept. The minutes of the executions whose
// attempts or history it deletes are marked for the roll of the insights, which count them. It returns how many rows it deleted, and
// whether it is behind: a table may hold more rows past their time than it deleted.
func (s *Store) prune(ctx context.Context, retention time.Duration, limit int) (deleted int, behind bool, err error) {
	now, err := s.now(ctx, s.db)
	if err != nil {
		return 0, false, err
	}
	cutoff := now.Add(-retention)
	deleted, examined, err := s.pruneAttempts(ctx, cutoff, limit)
	if err != nil {
		return deleted, false, err
	}
	behind = deleted == limit || examined == limit*pruneScanFactor
	// A value replaced says when the node had its first value: insights count it (see rollSQL),
	// so the minutes of its executions are marked.
	statements := []struct{ what, query string }{
		{"value history", `WITH gone AS (DELETE FROM {s}.value_history WHERE id IN (
				SELECT id FROM {s}.value_history WHERE changed_at < ? ORDER BY changed_at LIMIT ? FOR UPDATE SKIP LOCKED)
				RETURNING execution_id),
			marked AS (` + markFrom(`SELECT e.graph_name, e.graph_version, date_trunc('minute', e.created_at) AS minute
				FROM gone JOIN {s}.executions e ON e.id = gone.execution_id`) + `)
			SELECT count(*) FROM gone`},
		{"delivered notifications", `WITH gone AS (DELETE FROM {s}.notification_deliveries WHERE id IN (
				SELECT id FROM {s}.notification_deliveries WHERE state = 'DELIVERED' AND delivered_at < ?
				ORDER BY delivered_at LIMIT ? FOR UPDATE SKIP LOCKED) RETURNING id)
			SELECT count(*) FROM gone`},
	}
	for _, st := range statements {
		var n int
		if err := s.db.NewRaw(s.q(st.query), cutoff, limit).Scan(ctx, &n); err != nil {
			return deleted, false, fmt.Errorf("pruning %s: %w", st.what, err)
		}
		deleted += n
		behind = behind || n == limit
	}
	return deleted, behind, nil
}

// pruneAttempts deletes up to limit finished attempts older than cutoff that a newer attempt
// of their node supersedes, examining at most limit*pruneScanFactor attempts from the cursor
// on. It moves the cursor past what it examined, or back to the start at the cutoff. It returns
// how many it deleted and how many it examined.
func (s *Store) pruneAttempts(ctx context.Context, cutoff time.Time, limit int) (deleted, examined int, err error) {
	cur := &s.pruned
	cur.mu.Lock()
	defer cur.mu.Unlock()
	var res struct {
		Deleted int       `bun:"deleted"`
		Scanned int       `bun:"scanned"`
		At      time.Time `bun:"at"`
		ID      int64     `bun:"id"`
	}
	// "next" is the last attempt decided: the last one deleted if the limit was reached, or else
	// the last one examined.
	err = s.db.NewRaw(s.q(`WITH examined AS (
			SELECT c.id, c.finished_at, EXISTS (SELECT 1 FROM {s}.computations n
				WHERE n.execution_id = c.execution_id AND n.node = c.node AND n.id > c.id) AS superseded
			FROM {s}.computations c
			WHERE c.state IN ('SUCCESS', 'FAILED', 'ABANDONED', 'CANCELED') AND c.finished_at < ?
				AND c.finished_at >= ? AND (c.finished_at, c.id) > (?, ?)
			ORDER BY c.finished_at, c.id LIMIT ?),
		doomed AS (SELECT id, finished_at FROM examined WHERE superseded ORDER BY finished_at, id LIMIT ?),
		gone AS (DELETE FROM {s}.computations c USING doomed WHERE c.id = doomed.id RETURNING c.id, c.execution_id),
		marked AS (`+markFrom(`SELECT e.graph_name, e.graph_version, date_trunc('minute', e.created_at) AS minute
			FROM gone JOIN {s}.executions e ON e.id = gone.execution_id`)+`),
		next AS (SELECT finished_at, id FROM (
				(SELECT finished_at, id, 0 AS pick FROM doomed WHERE (SELECT count(*) FROM doomed) = ?
					ORDER BY finished_at DESC, id DESC LIMIT 1)
				UNION ALL
				(SELECT finished_at, id, 1 FROM examined ORDER BY finished_at DESC, id DESC LIMIT 1)) AS n
			ORDER BY pick LIMIT 1)
		SELECT (SELECT count(*) FROM gone) AS deleted, (SELECT count(*) FROM examined) AS scanned,
			coalesce((SELECT finished_at FROM next), ?) AS at, coalesce((SELECT id FROM next), 0) AS id`),
		cutoff, cur.at, cur.at, cur.id, limit*pruneScanFactor, limit, limit, cur.at).Scan(ctx, &res)
	if err != nil {
		return 0, 0, fmt.Errorf("pruning finished computations: %w", err)
	}
	cur.at, cur.id = res.At, res.ID
	if res.Scanned < limit*pruneScanFactor && res.Deleted < limit {
		cur.at, cur.id = time.Time{}, 0 // reached the cutoff: the next pass starts again
	}
	return res.Deleted, res.Scanned, nil
}
