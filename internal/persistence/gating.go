package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// promotionBatch caps the attempts one promotion statement makes AVAILABLE.
const promotionBatch = 1000

// errPromotionBusy means another transaction holds the promotion lock.
var errPromotionBusy = errors.New("the promotion lock is held")

type candidate struct {
	ID             int64   `bun:"id"`
	ConcurrencyKey *string `bun:"concurrency_key"`
	GraphKey       string  `bun:"graph_key"`
	Node           string  `bun:"node"`
	MaxParallel    *int    `bun:"max_parallel"`
}

type nodeCount struct {
	GraphKey string `bun:"graph_key"`
	Node     string `bun:"node"`
	N        int    `bun:"n"`
}

// PromoteDue makes due PENDING attempts AVAILABLE, outside any execution's transaction: those
// that wait for no key or limit (a retry's backoff has passed), then the gated ones that fit. It
// is the sweep's and the dispatchers' safety net, and what a write does after its commit when it
// could not promote inside it. It returns how many it promoted.
func (s *Store) PromoteDue(ctx context.Context) (int, error) {
	var ungated []int64
	err := s.db.NewRaw(s.q(`UPDATE {s}.computations SET state = 'AVAILABLE', available_at = coalesce(?::timestamptz, now())
		WHERE id IN (SELECT c.id FROM {s}.computations c
			WHERE c.state = 'PENDING' AND c.run_at <= coalesce(?::timestamptz, now())
				AND c.concurrency_key IS NULL AND c.max_parallel IS NULL
				AND NOT EXISTS (SELECT 1 FROM {s}.executions e WHERE e.id = c.execution_id AND e.archived_at IS NOT NULL)
			ORDER BY c.run_at, c.id LIMIT ? FOR UPDATE OF c SKIP LOCKED)
		RETURNING id`), s.clock.NowOrNil(), s.clock.NowOrNil(), promotionBatch).Scan(ctx, &ungated)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("promoting due computations: %w", err)
	}
	if len(ungated) > 0 {
		if err := s.notify(ctx, s.db, PayloadWork); err != nil {
			return 0, err
		}
	}
	var waiting bool
	err = s.db.NewRaw(s.q(`SELECT EXISTS (SELECT 1 FROM {s}.computations
		WHERE state = 'PENDING' AND run_at <= coalesce(?::timestamptz, now())
			AND (concurrency_key IS NOT NULL OR max_parallel IS NOT NULL))`), s.clock.NowOrNil()).Scan(ctx, &waiting)
	if err != nil || !waiting {
		return len(ungated), err // nothing gated is due: leave the promotion lock alone
	}
	var gated int
	err = s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if err := s.boundLocks(ctx, tx); err != nil {
			return err
		}
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		gated, err = s.promoteGated(ctx, tx, now, true)
		return err
	})
	return len(ungated) + gated, err
}

// promoteGated makes PENDING attempts with a concurrency key or a parallel limit AVAILABLE where
// run_at has passed, no attempt with the same key is AVAILABLE or RUNNING, and the node's
// MaxParallel leaves room. It queues a NOTIFY for them, and returns how many it promoted.
//
// Promotions of gated attempts are serialised by a transaction-level advisory lock, so that two
// replicas promoting at once cannot overshoot a limit or admit two holders of a key: only a
// promotion can add a gated attempt to AVAILABLE + RUNNING, and the next promotion sees the
// committed result. The lock is the last one a transaction takes, and its holder waits for no
// other lock. With wait false it does not wait for the lock either: it returns errPromotionBusy,
// and the caller promotes after its commit.
func (s *Store) promoteGated(ctx context.Context, tx bun.IDB, now time.Time, wait bool) (int, error) {
	if wait {
		if _, err := tx.NewRaw("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", s.promoteKey).Exec(ctx); err != nil {
			return 0, fmt.Errorf("taking the promotion lock: %w", err)
		}
	} else {
		var locked bool
		if err := tx.NewRaw("SELECT pg_try_advisory_xact_lock(hashtextextended(?, 0))", s.promoteKey).Scan(ctx, &locked); err != nil {
			return 0, fmt.Errorf("taking the promotion lock: %w", err)
		}
		if !locked {
			return 0, errPromotionBusy
		}
	}
	chosen, err := s.chooseGated(ctx, tx, now)
	if err != nil || len(chosen) == 0 {
		return 0, err
	}
	var promoted []int64
	err = tx.NewRaw(s.q(`UPDATE {s}.computations SET state = 'AVAILABLE', available_at = ?
		WHERE id IN (SELECT id FROM {s}.computations
			WHERE id = ANY(?::bigint[]) AND state = 'PENDING' FOR UPDATE SKIP LOCKED)
		RETURNING id`), now, pgdialect.Array(chosen)).Scan(ctx, &promoted)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("promoting gated computations: %w", err)
	}
	if len(promoted) > 0 {
		if err := s.notify(ctx, tx, PayloadWork); err != nil {
			return 0, err
		}
	}
	return len(promoted), nil
}

// chooseGated picks, oldest first, the due gated candidates that fit their key and limit. It
// looks past blocked ones: it considers only the oldest due attempt of each free key, and, for a
// node with a limit and no key, its oldest due attempts that the limit leaves room for. Attempts
// of archived executions are never promoted.
//
// Its cost follows the keys and nodes that wait, and the attempts it may promote, not the
// attempts that wait: it walks the keys, then the limited nodes, that have a waiting attempt, one
// index probe each (a loose index scan), and reads the first attempts of each free one in
// computations_pending_key_idx or computations_pending_limited_idx.
func (s *Store) chooseGated(ctx context.Context, tx bun.IDB, now time.Time) ([]int64, error) {
	var cands []candidate
	err := tx.NewRaw(s.q(`WITH RECURSIVE keys AS (
			(SELECT concurrency_key AS k FROM {s}.computations
				WHERE state = 'PENDING' AND concurrency_key IS NOT NULL ORDER BY concurrency_key LIMIT 1)
			UNION ALL
			SELECT (SELECT c.concurrency_key FROM {s}.computations c
				WHERE c.state = 'PENDING' AND c.concurrency_key > keys.k ORDER BY c.concurrency_key LIMIT 1)
			FROM keys WHERE keys.k IS NOT NULL
		), nodes AS (
			(SELECT graph_key, node, max_parallel FROM {s}.computations
				WHERE state = 'PENDING' AND concurrency_key IS NULL AND max_parallel IS NOT NULL
				ORDER BY graph_key, node LIMIT 1)
			UNION ALL
			SELECT n.graph_key, n.node, n.max_parallel FROM nodes, LATERAL (
				SELECT c.graph_key, c.node, c.max_parallel FROM {s}.computations c
				WHERE c.state = 'PENDING' AND c.concurrency_key IS NULL AND c.max_parallel IS NOT NULL
					AND (c.graph_key, c.node) > (nodes.graph_key, nodes.node)
				ORDER BY c.graph_key, c.node LIMIT 1) n
		)
		SELECT id, concurrency_key, graph_key, node, max_parallel FROM (
			SELECT oldest.* FROM keys CROSS JOIN LATERAL (
				SELECT c.id, c.concurrency_key, c.graph_key, c.node, c.max_parallel, c.run_at FROM {s}.computations c
				WHERE c.state = 'PENDING' AND c.concurrency_key = keys.k AND c.run_at <= ?
					AND NOT EXISTS (SELECT 1 FROM {s}.executions e WHERE e.id = c.execution_id AND e.archived_at IS NOT NULL)
				ORDER BY c.run_at, c.id LIMIT 1) oldest
			WHERE keys.k IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {s}.computations h
				WHERE h.state IN ('AVAILABLE', 'RUNNING') AND h.concurrency_key = keys.k)
			UNION ALL
			SELECT first.* FROM nodes CROSS JOIN LATERAL (
				SELECT c.id, c.concurrency_key, c.graph_key, c.node, c.max_parallel, c.run_at FROM {s}.computations c
				WHERE c.state = 'PENDING' AND c.concurrency_key IS NULL AND c.max_parallel IS NOT NULL
					AND c.graph_key = nodes.graph_key AND c.node = nodes.node AND c.run_at <= ?
					AND NOT EXISTS (SELECT 1 FROM {s}.executions e WHERE e.id = c.execution_id AND e.archived_at IS NOT NULL)
				ORDER BY c.run_at, c.id
				LIMIT greatest(nodes.max_parallel - (SELECT count(*) FROM {s}.computations h
					WHERE h.state IN ('AVAILABLE', 'RUNNING') AND h.max_parallel IS NOT NULL
						AND h.graph_key = nodes.graph_key AND h.node = nodes.node), 0)) first
		) due ORDER BY run_at, id LIMIT ?`), now, now, promotionBatch).Scan(ctx, &cands)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("finding gated computations: %w", err)
	}
	if len(cands) == 0 {
		return nil, nil
	}
	var counts []nodeCount
	err = tx.NewRaw(s.q(`SELECT graph_key, node, count(*) AS n FROM {s}.computations
		WHERE state IN ('AVAILABLE', 'RUNNING') AND max_parallel IS NOT NULL GROUP BY graph_key, node`)).Scan(ctx, &counts)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("counting limited computations: %w", err)
	}
	active := map[[2]string]int{}
	for _, c := range counts {
		active[[2]string{c.GraphKey, c.Node}] = c.N
	}
	var chosen []int64
	for _, c := range cands { // at most one per key
		node := [2]string{c.GraphKey, c.Node}
		if c.MaxParallel != nil && active[node] >= *c.MaxParallel {
			continue
		}
		active[node]++
		chosen = append(chosen, c.ID)
	}
	return chosen, nil
}
