package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// Abandonment reasons recorded in a computation's error.
const (
	ReasonDeadline  = "abandoned: deadline passed"
	ReasonHeartbeat = "abandoned: heartbeat deadline passed"
)

// errAbandoned is the cause recorded for OnSave when abandonment used up the attempts.
var errAbandoned = errors.New("timed out")

// SweepResult says what one sweep pass did.
type SweepResult struct {
	// Skipped is true when another replica held the sweep lock.
	Skipped bool
	// Abandoned lists the attempts abandoned by this pass, with their reasons in Error.
	Abandoned []*Computation
	// Promoted counts the PENDING computations made AVAILABLE.
	Promoted int
}

type expired struct {
	Computation
	Reason string `bun:"reason"`
}

// Sweep runs one pass, single-flight across replicas: it abandons up to limit RUNNING attempts
// of the served graphs that are past their deadline or heartbeat deadline, retries them or fails
// their node, and promotes PENDING attempts whose run_at has passed.
func (s *Store) Sweep(ctx context.Context, limit int) (SweepResult, error) {
	var res SweepResult
	var states []*execState
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		res, states = SweepResult{}, nil
		var locked bool
		if err := tx.NewRaw("SELECT pg_try_advisory_xact_lock(hashtextextended(?, 0))", s.sweepKey).Scan(ctx, &locked); err != nil {
			return fmt.Errorf("taking the sweep lock: %w", err)
		}
		if !locked {
			res.Skipped = true
			return nil
		}
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		if len(s.keys) > 0 {
			if err := s.abandon(ctx, tx, now, limit, &res, &states); err != nil {
				return err
			}
		}
		return s.promote(ctx, tx, now, &res)
	})
	if err != nil {
		return SweepResult{}, err
	}
	for _, st := range states {
		s.fireSaved(st)
	}
	return res, nil
}

func (s *Store) abandon(ctx context.Context, tx bun.Tx, now time.Time, limit int, res *SweepResult, states *[]*execState) error {
	var rows []*expired
	err := tx.NewRaw(s.q(`SELECT *, CASE WHEN deadline <= ? THEN ? ELSE ? END AS reason
		FROM {s}.computations
		WHERE state = 'RUNNING' AND graph_key IN (?) AND (deadline <= ? OR heartbeat_deadline <= ?)
		ORDER BY execution_id, id
		LIMIT ?
		FOR UPDATE SKIP LOCKED`),
		now, ReasonDeadline, ReasonHeartbeat, bun.List(s.keys), now, now, limit).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return fmt.Errorf("finding expired computations: %w", err)
	}
	for _, row := range rows {
		c := &row.Computation
		// Guarded by state and horizon: a row that completed or was extended meanwhile stays as it is.
		r, err := tx.NewRaw(s.q(`UPDATE {s}.computations SET state = 'ABANDONED', error = ?, finished_at = ?
			WHERE id = ? AND state = 'RUNNING' AND (deadline <= ? OR heartbeat_deadline <= ?)`),
			row.Reason, now, c.ID, now, now).Exec(ctx)
		if err != nil {
			return fmt.Errorf("abandoning computation %d: %w", c.ID, err)
		}
		if n, _ := r.RowsAffected(); n == 0 {
			continue
		}
		c.State, c.Error = StateAbandoned, &row.Reason
		st, err := s.load(ctx, tx, c.ExecutionID)
		if err != nil {
			return err
		}
		st.revision++
		if err := s.afterFailure(ctx, tx, st, c, fmt.Errorf("%s: %w", row.Reason, errAbandoned), false); err != nil {
			return err
		}
		if err := s.finish(ctx, tx, st); err != nil {
			return err
		}
		res.Abandoned = append(res.Abandoned, c)
		*states = append(*states, st)
	}
	return nil
}

// promote makes PENDING attempts whose run_at has passed AVAILABLE.
func (s *Store) promote(ctx context.Context, tx bun.IDB, now time.Time, res *SweepResult) error {
	var ids []int64
	err := tx.NewRaw(s.q(`UPDATE {s}.computations SET state = 'AVAILABLE'
		WHERE id IN (SELECT id FROM {s}.computations WHERE state = 'PENDING' AND run_at <= ?
			ORDER BY run_at, id FOR UPDATE SKIP LOCKED)
		RETURNING id`), now).Scan(ctx, &ids)
	if err != nil && !isNoRows(err) {
		return fmt.Errorf("promoting pending computations: %w", err)
	}
	res.Promoted = len(ids)
	if len(ids) == 0 {
		return nil
	}
	return s.notify(ctx, tx, PayloadWork)
}

// PromoteDue makes due PENDING attempts AVAILABLE outside a sweep, so that a retry's backoff is
// not stretched to the sweep interval. It returns how many it promoted.
func (s *Store) PromoteDue(ctx context.Context) (int, error) {
	var res SweepResult
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		return s.promote(ctx, tx, now, &res)
	})
	return res.Promoted, err
}
