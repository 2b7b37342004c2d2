package persistence

import (
	"context"
	"fmt"
	"time"
)

// prune deletes, oldest first and up to limit rows per table, what is older than retention and
// that no semantics need: finished attempts that are not the newest of their node (the newest
// decides what runs next, and what Get reports), value history, and delivered notifications.
// Values, historians and notification claims are kept. It returns how many rows it deleted.
func (s *Store) prune(ctx context.Context, retention time.Duration, limit int) (int, error) {
	statements := []struct{ what, query string }{
		{"finished computations", `DELETE FROM {s}.computations WHERE id IN (
			SELECT c.id FROM {s}.computations c
			WHERE c.state IN ('SUCCESS', 'FAILED', 'ABANDONED', 'CANCELED') AND c.finished_at < ?
				AND EXISTS (SELECT 1 FROM {s}.computations n
					WHERE n.execution_id = c.execution_id AND n.node = c.node AND n.id > c.id)
			ORDER BY c.finished_at LIMIT ? FOR UPDATE SKIP LOCKED)`},
		{"value history", `DELETE FROM {s}.value_history WHERE id IN (
			SELECT id FROM {s}.value_history WHERE changed_at < ? ORDER BY changed_at LIMIT ? FOR UPDATE SKIP LOCKED)`},
		{"delivered notifications", `DELETE FROM {s}.notification_deliveries WHERE id IN (
			SELECT id FROM {s}.notification_deliveries WHERE state = 'DELIVERED' AND delivered_at < ?
			ORDER BY delivered_at LIMIT ? FOR UPDATE SKIP LOCKED)`},
	}
	now, err := s.now(ctx, s.db)
	if err != nil {
		return 0, err
	}
	deleted := 0
	for _, st := range statements {
		res, err := s.db.NewRaw(s.q(st.query), now.Add(-retention), limit).Exec(ctx)
		if err != nil {
			return deleted, fmt.Errorf("pruning %s: %w", st.what, err)
		}
		n, _ := res.RowsAffected()
		deleted += int(n)
	}
	return deleted, nil
}
