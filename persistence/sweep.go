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
	// Pruned counts the rows of long-gone replicas deleted.
	Pruned int
}

// SweepOptions configure a sweep pass.
type SweepOptions struct {
	// Limit caps the attempts abandoned in one pass.
	Limit int
	// ReplicaStaleAfter: the RUNNING attempts of a replica whose heartbeat row is older, or
	// missing, are abandoned. Zero disables the check.
	ReplicaStaleAfter time.Duration
	// ReplicaRetention: the rows of replicas silent for longer are deleted. Zero keeps them.
	ReplicaRetention time.Duration
}

type expired struct {
	Computation
	Reason string `bun:"reason"`
}

// ReasonReplica is the audit reason of an attempt abandoned because its replica went silent.
func ReasonReplica(replicaID string) string {
	return "abandoned: replica " + replicaID + " stopped heartbeating"
}

// Sweep runs one pass, single-flight across replicas. It abandons RUNNING attempts of the served
// graphs that are past their deadline or heartbeat deadline, or whose replica stopped
// heartbeating, and retries them or fails their node; it promotes PENDING attempts whose run_at
// has passed; and it prunes the rows of long-gone replicas.
func (s *Store) Sweep(ctx context.Context, opts SweepOptions) (SweepResult, error) {
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
			if err := s.abandon(ctx, tx, now, opts, &res, &states); err != nil {
				return err
			}
		}
		if opts.ReplicaRetention > 0 {
			r, err := tx.NewRaw(s.q("DELETE FROM {s}.replica_heartbeats WHERE last_heartbeat < ?"),
				now.Add(-opts.ReplicaRetention)).Exec(ctx)
			if err != nil {
				return fmt.Errorf("pruning replica heartbeats: %w", err)
			}
			n, _ := r.RowsAffected()
			res.Pruned = int(n)
		}
		res.Promoted, err = s.promote(ctx, tx, now)
		return err
	})
	if err != nil {
		return SweepResult{}, err
	}
	for _, st := range states {
		s.fireSaved(st)
	}
	return res, nil
}

func (s *Store) abandon(ctx context.Context, tx bun.Tx, now time.Time, opts SweepOptions, res *SweepResult, states *[]*execState) error {
	checkReplicas := opts.ReplicaStaleAfter > 0
	var rows []*expired
	err := tx.NewRaw(s.q(`WITH live AS (
			SELECT replica_id FROM {s}.replica_heartbeats WHERE last_heartbeat >= ?)
		SELECT c.*, CASE
				WHEN c.deadline <= ? THEN ?
				WHEN ? AND c.replica_id NOT IN (SELECT replica_id FROM live)
					THEN 'abandoned: replica ' || c.replica_id || ' stopped heartbeating'
				ELSE ? END AS reason
		FROM {s}.computations c
		WHERE c.state = 'RUNNING' AND c.graph_key IN (?)
			AND NOT EXISTS (SELECT 1 FROM {s}.executions e WHERE e.id = c.execution_id AND e.archived_at IS NOT NULL)
			AND (c.deadline <= ? OR c.heartbeat_deadline <= ?
				OR (? AND c.replica_id NOT IN (SELECT replica_id FROM live)))
		ORDER BY c.execution_id, c.id
		LIMIT ?
		FOR UPDATE OF c SKIP LOCKED`),
		now.Add(-opts.ReplicaStaleAfter), now, ReasonDeadline, checkReplicas, ReasonHeartbeat,
		bun.List(s.keys), now, now, checkReplicas, opts.Limit).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return fmt.Errorf("finding expired computations: %w", err)
	}
	for _, row := range rows {
		c := &row.Computation
		// Guarded by state and claim: a row completed or released meanwhile stays as it is.
		r, err := tx.NewRaw(s.q(`UPDATE {s}.computations SET state = 'ABANDONED', error = ?, finished_at = ?
			WHERE id = ? AND state = 'RUNNING' AND claim_token = ?::uuid`),
			row.Reason, now, c.ID, c.ClaimToken).Exec(ctx)
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
		st.promote = c.gated() // its slot is free
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
