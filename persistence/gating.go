package persistence

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// promotionBatch caps the gated candidates one promotion considers.
const promotionBatch = 1000

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

// promote makes PENDING attempts AVAILABLE where run_at has passed, no attempt with the same
// concurrency key is AVAILABLE or RUNNING, and the node's MaxParallel leaves room. It returns how
// many it promoted, and queues a NOTIFY for them.
//
// Promotions are serialised by a transaction-level advisory lock, so that two replicas promoting
// at once cannot overshoot a limit or admit two holders of a key: only a promotion can add a
// gated attempt to AVAILABLE + RUNNING, and the next promotion sees the committed result. The
// lock is the last one any transaction takes, and its holder waits for no other lock.
func (s *Store) promote(ctx context.Context, tx bun.IDB, now time.Time) (int, error) {
	if _, err := tx.NewRaw("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", s.promoteKey).Exec(ctx); err != nil {
		return 0, fmt.Errorf("taking the promotion lock: %w", err)
	}
	var ungated []int64
	err := tx.NewRaw(s.q(`UPDATE {s}.computations SET state = 'AVAILABLE'
		WHERE id IN (SELECT id FROM {s}.computations
			WHERE state = 'PENDING' AND run_at <= ? AND concurrency_key IS NULL AND max_parallel IS NULL
			ORDER BY run_at, id FOR UPDATE SKIP LOCKED)
		RETURNING id`), now).Scan(ctx, &ungated)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("promoting due computations: %w", err)
	}
	chosen, err := s.chooseGated(ctx, tx, now)
	if err != nil {
		return 0, err
	}
	if len(chosen) > 0 {
		_, err = tx.NewRaw(s.q(`UPDATE {s}.computations SET state = 'AVAILABLE'
			WHERE id = ANY(?::bigint[]) AND state = 'PENDING'`), pgdialect.Array(chosen)).Exec(ctx)
		if err != nil {
			return 0, fmt.Errorf("promoting gated computations: %w", err)
		}
	}
	n := len(ungated) + len(chosen)
	if n > 0 {
		if err := s.notify(ctx, tx, PayloadWork); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// chooseGated picks, oldest first, the due gated candidates that fit their key and limit.
func (s *Store) chooseGated(ctx context.Context, tx bun.IDB, now time.Time) ([]int64, error) {
	var cands []candidate
	err := tx.NewRaw(s.q(`SELECT id, concurrency_key, graph_key, node, max_parallel FROM {s}.computations
		WHERE state = 'PENDING' AND run_at <= ? AND (concurrency_key IS NOT NULL OR max_parallel IS NOT NULL)
		ORDER BY run_at, id LIMIT ?`), now, promotionBatch).Scan(ctx, &cands)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("finding gated computations: %w", err)
	}
	if len(cands) == 0 {
		return nil, nil
	}
	var keys []string
	for _, c := range cands {
		if c.ConcurrencyKey != nil {
			keys = append(keys, *c.ConcurrencyKey)
		}
	}
	held := map[string]bool{}
	if len(keys) > 0 {
		var busy []string
		err := tx.NewRaw(s.q(`SELECT DISTINCT concurrency_key FROM {s}.computations
			WHERE state IN ('AVAILABLE', 'RUNNING') AND concurrency_key = ANY(?::text[])`), pgdialect.Array(keys)).Scan(ctx, &busy)
		if err != nil && !isNoRows(err) {
			return nil, fmt.Errorf("reading held concurrency keys: %w", err)
		}
		for _, k := range busy {
			held[k] = true
		}
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
	for _, c := range cands {
		node := [2]string{c.GraphKey, c.Node}
		if c.ConcurrencyKey != nil && held[*c.ConcurrencyKey] {
			continue
		}
		if c.MaxParallel != nil && active[node] >= *c.MaxParallel {
			continue
		}
		if c.ConcurrencyKey != nil {
			held[*c.ConcurrencyKey] = true
		}
		active[node]++
		chosen = append(chosen, c.ID)
	}
	return chosen, nil
}

// PromoteDue promotes due PENDING attempts outside a sweep, so that a retry's backoff or a freed
// slot elsewhere is not stretched to the sweep interval. It returns how many it promoted.
func (s *Store) PromoteDue(ctx context.Context) (int, error) {
	var n int
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		n, err = s.promote(ctx, tx, now)
		return err
	})
	return n, err
}
