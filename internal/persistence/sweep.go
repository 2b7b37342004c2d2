package persistence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/journey-go/journey/internal/telemetry"
)

// Abandonment reasons recorded in a computation's error.
const (
	ReasonDeadline  = "abandoned: deadline passed"
	ReasonHeartbeat = "abandoned: heartbeat deadline passed"
)

// ReasonReplica is the audit reason of an attempt abandoned because its replica went silent.
func ReasonReplica(replicaID string) string {
	return "abandoned: replica " + replicaID + " stopped heartbeating"
}

// ReasonRestarted is the audit reason of an attempt claimed by an earlier process of a replica id
// that has started again since.
func ReasonRestarted(replicaID string) string {
	return "abandoned: replica " + replicaID + " restarted"
}

// Reason categories of an abandonment, bounded for metrics: ReasonCategory gives them.
const (
	CategoryDeadline         = "deadline"
	CategoryHeartbeat        = "heartbeat"
	CategoryReplicaStale     = "replica_stale"
	CategoryReplicaRestarted = "replica_restarted"
)

// ReasonCategory returns the category of an abandonment's audit reason.
func ReasonCategory(reason string) string {
	switch {
	case reason == ReasonDeadline:
		return CategoryDeadline
	case reason == ReasonHeartbeat:
		return CategoryHeartbeat
	case strings.HasSuffix(reason, " restarted"):
		return CategoryReplicaRestarted
	default:
		return CategoryReplicaStale
	}
}

// errAbandoned is the cause recorded for OnSave when abandonment used up the attempts.
var errAbandoned = errors.New("timed out")

// errNothingToDo rolls back a transaction that found its work done by someone else.
var errNothingToDo = errors.New("nothing to do")

// SweepResult says what one sweep pass did.
type SweepResult struct {
	// Skipped is true when another replica holds the sweep lease.
	Skipped bool
	// Abandoned lists the attempts abandoned by this pass, with their reasons in Error.
	Abandoned []*Computation
	// Failed counts the attempts this pass could not abandon, because of an error (logged).
	Failed int
	// Canceled counts the waiting attempts of archived executions canceled by this pass.
	Canceled int
	// Promoted counts the PENDING computations made AVAILABLE.
	Promoted int
	// Pruned counts the rows of long-gone replicas deleted.
	Pruned int
	// Deleted counts the rows deleted by retention.
	Deleted int
}

// SweepOptions configure a sweep pass.
type SweepOptions struct {
	// Holder names the replica that sweeps, in the sweep lease.
	Holder string
	// LeaseTTL is how long a pass's lease lasts: the holder renews it at every pass, and another
	// replica takes over once it runs out. Default 15s.
	LeaseTTL time.Duration
	// Limit caps the attempts abandoned in one pass, and the rows each retention statement
	// deletes.
	Limit int
	// ReplicaRetention: the rows of replicas silent for longer are deleted. Zero keeps them.
	ReplicaRetention time.Duration
	// Retention: finished attempts (but the newest of each node), value history and delivered
	// notifications older than this are deleted. Zero keeps them.
	Retention time.Duration
}

// expired is an attempt the sweep should abandon, with the reason.
type expired struct {
	ID          int64   `bun:"id"`
	ExecutionID string  `bun:"execution_id"`
	ClaimToken  *string `bun:"claim_token"`
	Reason      string  `bun:"reason"`
	Traceparent *string `bun:"traceparent"`
}

// Sweep runs one pass, if this replica holds the sweep lease of its graphs. It abandons the
// RUNNING attempts of the served graphs that are past their deadline or heartbeat deadline, or
// whose replica stopped heartbeating by its own stale-after, or restarted since the claim, and
// retries them or fails their node; it cancels the waiting attempts of archived executions that
// archiving could not; it promotes PENDING attempts that are due; and it prunes.
//
// Each abandonment is a transaction of its own, and promotion one more: a pass never holds an
// execution's lock and the promotion lock together, nor many locks for long. One attempt's error
// is logged and counted; it does not stop the pass.
func (s *Store) Sweep(ctx context.Context, opts SweepOptions) (SweepResult, error) {
	var res SweepResult
	if len(s.keys) == 0 {
		return res, nil
	}
	held, err := s.AcquireLease(ctx, s.sweepLease, opts.Holder, cmp.Or(opts.LeaseTTL, 15*time.Second))
	if err != nil || !held {
		res.Skipped = !held
		return res, err
	}
	if err := s.abandon(ctx, opts.Limit, &res); err != nil {
		return res, err
	}
	var canceled []struct {
		ID int64 `bun:"id"`
	}
	err = s.db.NewRaw(s.q(`UPDATE {s}.computations SET state = 'CANCELED', error = ?, finished_at = coalesce(?::timestamptz, now())
		WHERE id IN (SELECT c.id FROM {s}.computations c JOIN {s}.executions e ON e.id = c.execution_id
			WHERE c.state IN ('PENDING', 'AVAILABLE') AND e.archived_at IS NOT NULL
			LIMIT ? FOR UPDATE OF c, e SKIP LOCKED)
		RETURNING id`), ReasonArchived, s.clock.NowOrNil(), opts.Limit).Scan(ctx, &canceled)
	if err != nil && !isNoRows(err) {
		return res, fmt.Errorf("canceling the waiting work of archived executions: %w", err)
	}
	res.Canceled = len(canceled)
	if res.Promoted, err = s.PromoteDue(ctx); err != nil {
		return res, err
	}
	if opts.ReplicaRetention > 0 {
		r, err := s.db.NewRaw(s.q(`DELETE FROM {s}.replica_heartbeats
			WHERE last_heartbeat < coalesce(?::timestamptz, now()) - ? * interval '1 millisecond'`),
			s.clock.NowOrNil(), opts.ReplicaRetention.Milliseconds()).Exec(ctx)
		if err != nil {
			return res, fmt.Errorf("pruning replica heartbeats: %w", err)
		}
		n, _ := r.RowsAffected()
		res.Pruned = int(n)
	}
	if opts.Retention > 0 {
		if res.Deleted, err = s.prune(ctx, opts.Retention, opts.Limit); err != nil {
			return res, err
		}
	}
	return res, nil
}

// abandon abandons up to limit expired attempts, each in a transaction of its own.
func (s *Store) abandon(ctx context.Context, limit int, res *SweepResult) error {
	var rows []expired
	err := s.db.NewRaw(s.q(`WITH t AS (SELECT coalesce(?::timestamptz, now()) AS now)
		SELECT c.id, c.execution_id, c.claim_token, c.traceparent, CASE
				WHEN c.deadline <= t.now THEN ?
				WHEN r.replica_id IS NULL OR r.last_heartbeat < t.now - r.stale_after_ms * interval '1 millisecond'
					THEN 'abandoned: replica ' || c.replica_id || ' stopped heartbeating'
				WHEN c.claimed_at < r.started_at THEN 'abandoned: replica ' || c.replica_id || ' restarted'
				ELSE ? END AS reason
		FROM t, {s}.computations c LEFT JOIN {s}.replica_heartbeats r ON r.replica_id = c.replica_id
		WHERE c.state = 'RUNNING' AND c.graph_key IN (?)
			AND (c.deadline <= t.now OR c.heartbeat_deadline <= t.now OR r.replica_id IS NULL
				OR r.last_heartbeat < t.now - r.stale_after_ms * interval '1 millisecond'
				OR c.claimed_at < r.started_at)
		ORDER BY c.id
		LIMIT ?`), s.clock.NowOrNil(), ReasonDeadline, ReasonHeartbeat, bun.List(s.keys), limit).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return fmt.Errorf("finding expired computations: %w", err)
	}
	for _, row := range rows {
		c, err := s.abandonOne(ctx, row)
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			res.Failed++
			s.logger.Error("abandoning a computation failed; the next pass tries again", "service", "sweeper",
				"computation_id", row.ID, "execution_id", row.ExecutionID, "reason", row.Reason, "error", err)
		case c != nil:
			res.Abandoned = append(res.Abandoned, c)
		}
	}
	return nil
}

// abandonOne abandons one attempt, if it is still RUNNING under the same claim and nobody holds
// its row (its completion, say), and retries it or fails its node. It returns nil if it left the
// attempt alone. Its span, which records the reason, links to the write that created the attempt,
// and the retry links to it.
func (s *Store) abandonOne(ctx context.Context, row expired) (c *Computation, err error) {
	ctx, span := s.tracer.Start(ctx, "journey.abandon", trace.WithNewRoot(), trace.WithLinks(telemetry.Links(row.Traceparent)...),
		trace.WithAttributes(telemetry.KeyExecution.String(row.ExecutionID), telemetry.KeyComputation.Int64(row.ID),
			telemetry.KeyAbandonReason.String(ReasonCategory(row.Reason))))
	defer func() {
		switch {
		case err != nil:
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		case c == nil:
			span.SetAttributes(telemetry.KeyOutcome.String("skipped")) // finished, or taken by another sweep
		default:
			span.SetAttributes(telemetry.KeyNode.String(c.Node), telemetry.KeyAttempt.Int(c.Attempt))
			span.SetStatus(codes.Error, row.Reason)
		}
		span.End()
	}()
	guard := func(ctx context.Context, tx bun.IDB) error {
		if err := s.boundLocks(ctx, tx); err != nil {
			return err
		}
		var got []*Computation
		err := tx.NewRaw(s.q(`UPDATE {s}.computations SET state = 'ABANDONED', error = ?, finished_at = coalesce(?::timestamptz, now())
			WHERE id = (SELECT id FROM {s}.computations
				WHERE id = ? AND state = 'RUNNING' AND claim_token = ?::uuid FOR UPDATE SKIP LOCKED)
			RETURNING *`), row.Reason, s.clock.NowOrNil(), row.ID, row.ClaimToken).Scan(ctx, &got)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("abandoning computation %d: %w", row.ID, err)
		}
		if len(got) == 0 {
			return errNothingToDo
		}
		c = got[0]
		return nil
	}
	err = s.write(ctx, row.ExecutionID, guard, nil, func(ctx context.Context, tx *txn, st *execState) error {
		if s.hooks.Abandoning != nil {
			s.hooks.Abandoning(c)
		}
		st.revision++
		st.promote = c.gated() // its slot is free
		return s.afterFailure(ctx, tx, st, c, fmt.Errorf("%s: %w", row.Reason, errAbandoned), false)
	})
	if errors.Is(err, errNothingToDo) {
		return nil, nil
	}
	return c, err
}
