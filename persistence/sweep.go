package persistence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/journey-go/journey/internal/telemetry"
	"github.com/journey-go/journey/persistence/machine"
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
	reason, _, _ = strings.Cut(reason, gaveUp)
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

// SweepResult says what one sweep pass did.
type SweepResult struct {
	// Skipped is true when another replica holds the sweep lease.
	Skipped bool
	// Abandoned lists the attempts abandoned by this pass, with their reasons in Error.
	Abandoned []*Computation
	// Failed counts the attempts this pass could not abandon, because of an error (logged).
	Failed int
	// Promoted counts the PENDING computations made AVAILABLE.
	Promoted int
	// Pruned counts the rows of long-gone replicas deleted.
	Pruned int
	// Deleted counts the rows deleted by retention.
	Deleted int
	// RetentionBehind reports that retention may have more rows to delete than this pass
	// deleted: a pass should follow at once.
	RetentionBehind bool
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
	// PruneOnly: the pass deletes what Retention lets go, and does nothing else.
	PruneOnly bool
}

// expired is an attempt the sweep should abandon, with the reason.
type expired struct {
	ID          int64   `bun:"id"`
	Lane        int16   `bun:"lane"`
	ExecutionID string  `bun:"execution_id"`
	Node        string  `bun:"node"`
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
// is logged and counted; it does not stop the pass, and the attempt sits out the next passes.
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
	if opts.PruneOnly {
		if opts.Retention > 0 {
			res.Deleted, res.RetentionBehind, err = s.prune(ctx, opts.Retention, opts.Limit)
		}
		return res, err
	}
	if err := s.abandon(ctx, opts.Limit, &res); err != nil {
		return res, err
	}
	if res.Promoted, err = s.PromoteDue(ctx); err != nil {
		return res, err
	}
	if opts.ReplicaRetention > 0 {
		err := s.db.NewRaw(s.q(deleteReplicasQuery(
			"last_heartbeat < coalesce(?::timestamptz, now()) - ? * interval '1 millisecond'", "d.last_heartbeat")),
			s.clock.NowOrNil(), opts.ReplicaRetention.Milliseconds()).Scan(ctx, &res.Pruned)
		if err != nil {
			return res, fmt.Errorf("pruning replica heartbeats: %w", err)
		}
	}
	if opts.Retention > 0 {
		if res.Deleted, res.RetentionBehind, err = s.prune(ctx, opts.Retention, opts.Limit); err != nil {
			return res, err
		}
	}
	return res, nil
}

// archivedWaiting is what sweepArchived cancels, from the table of states.
var archivedWaiting = machine.ArchivedWaiting.SQL("c", "e", "")

// archivedPage is the number of archived executions that a repair looks at (see sweepArchived).
const archivedPage = 1000

// sweepArchived cancels the waiting attempts of archived executions, which their archiving could
// not cancel (a replica that wrote them had not seen the archive): an execution at a time
// (machine.SweepArchived). It returns how many executions it wrote.
//
// Each call looks at the next page of archivedPage archived executions, by id from where the last
// one stopped (archivedAfter), and starts again from the first once it has seen the last; a page
// that had more than limit executions to write is looked at again. Its cost is a page, whatever
// the number of archived executions and of waiting attempts: a join of the waiting attempts with
// the archived executions read one side whole, 4.5 s with 200,000 attempts waiting. The attempts
// it cancels are the table's (machine.ArchivedWaiting).
func (s *Store) sweepArchived(ctx context.Context, limit int) (int, error) {
	var page []struct {
		Lane int16  `bun:"lane"`
		ID   string `bun:"id"`
	}
	after := ""
	if p := s.archivedAfter.Load(); p != nil {
		after = *p
	}
	err := s.db.NewRaw(s.q(`SELECT lane, id FROM {s}.executions WHERE archived_at IS NOT NULL AND id > ? ORDER BY id LIMIT ?`),
		after, archivedPage).Scan(ctx, &page)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("reading a page of the archived executions: %w", err)
	}
	if len(page) == 0 {
		s.archivedAfter.Store(nil)
		return 0, nil
	}
	lanes, ids := make([]int16, len(page)), make([]string, len(page))
	for i, e := range page {
		lanes[i], ids[i] = e.Lane, e.ID
	}
	var waiting []string
	err = s.db.NewRaw(s.q(`SELECT DISTINCT c.execution_id FROM `+executionKeys("?", "?")+` k
		JOIN {s}.executions e ON e.lane = k.lane AND e.id = k.id
		JOIN {s}.nodes c ON c.lane = e.lane AND c.execution_id = e.id
		WHERE `+archivedWaiting+` AND c.graph_key IN (?)`+s.pinned("c", "?")+`
		LIMIT ?`), append([]any{pgdialect.Array(lanes), pgdialect.Array(ids), bun.List(s.keys)}, append(s.pinnedArgs(lanes), limit)...)...).Scan(ctx, &waiting)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("finding the waiting work of archived executions: %w", err)
	}
	if len(waiting) < limit { // else the next repair looks at this page again
		next := ""
		if len(page) == archivedPage {
			next = page[len(page)-1].ID
		}
		s.archivedAfter.Store(&next)
	}
	n := 0
	for _, id := range waiting {
		switch err := s.event(ctx, id, s.boundLocks, machine.SweepArchived{}); {
		case err == nil:
			n++
		case ctx.Err() != nil:
			return n, ctx.Err()
		default:
			s.logger.Warn("canceling the waiting work of an archived execution failed; the next sweep tries again",
				"service", "sweeper", "execution_id", id, "error", err)
		}
	}
	return n, nil
}

// abandon abandons up to limit expired attempts, each in a transaction of its own, in id order.
// An attempt it fails to abandon is logged, and the pass goes on past it to the next ones; it sits
// out the next passes too (see abandonFailures), so that the attempts that fail every time cannot
// fill each pass, and it is abandoned alone once it has failed abandonGiveUp times in a row.
func (s *Store) abandon(ctx context.Context, limit int, res *SweepResult) error {
	pass, skip := s.abandoning.begin()
	tried := map[int64]bool{}
	var after int64
	for len(res.Abandoned) < limit {
		page := limit - len(res.Abandoned)
		rows, err := s.expiredAttempts(ctx, after, skip, page)
		if err != nil {
			return err
		}
		for _, row := range rows {
			after, tried[row.ID] = row.ID, true
			c, err := s.abandonOne(ctx, row)
			switch {
			case err != nil && ctx.Err() != nil:
				return ctx.Err()
			case err != nil:
				res.Failed++
				c = s.abandonFailed(ctx, pass, row, err)
			default:
				s.abandoning.forget(row.ID)
			}
			if c != nil {
				res.Abandoned = append(res.Abandoned, c)
			}
		}
		if len(rows) < page {
			s.abandoning.forgetGone(pass, tried) // the pass has seen every expired attempt
			break
		}
	}
	return nil
}

// expiredAttempts returns up to limit expired attempts of the served graphs, in id order, after
// the attempt after, but those of skip.
//
// The replicas are read first, and passed on to the search of the attempts, a statement a lane
// on Citus (see lanesWith), where a statement cannot join the distributed nodes with the
// replicas' table.
func (s *Store) expiredAttempts(ctx context.Context, after int64, skip []int64, limit int) ([]expired, error) {
	var replicas []struct {
		ID        string    `bun:"replica_id"`
		Live      bool      `bun:"live"`
		StartedAt time.Time `bun:"started_at"`
	}
	err := s.db.NewRaw(s.q(`SELECT r.replica_id, `+liveReplica+` AS live, r.started_at FROM {s}.replica_heartbeats r`),
		s.clock.NowOrNil()).Scan(ctx, &replicas)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("reading the replicas' heartbeats: %w", err)
	}
	ids, live, started := make([]string, len(replicas)), make([]bool, len(replicas)), make([]time.Time, len(replicas))
	for i, r := range replicas {
		ids[i], live[i], started[i] = r.ID, r.Live, r.StartedAt
	}
	lanes, err := s.lanesWith(ctx, s.db, `SELECT lane FROM {s}.nodes WHERE state = 'RUNNING' AND graph_key IN (?)`, bun.List(s.keys))
	if err != nil {
		return nil, err
	}
	var rows []expired
	for _, lane := range lanes {
		var found []expired
		err := s.db.NewRaw(s.q(`WITH t AS (SELECT coalesce(?::timestamptz, now()) AS now)
		SELECT c.attempt_id AS id, c.lane, c.execution_id, c.node, c.claim_token, c.traceparent, CASE
				WHEN c.deadline <= t.now THEN ?
				WHEN r.replica_id IS NULL OR NOT r.live THEN 'abandoned: replica ' || c.replica_id || ' stopped heartbeating'
				WHEN c.claimed_at < r.started_at THEN 'abandoned: replica ' || c.replica_id || ' restarted'
				ELSE ? END AS reason
		FROM t, {s}.nodes c
			LEFT JOIN unnest(?::text[], ?::boolean[], ?::timestamptz[]) AS r(replica_id, live, started_at) ON r.replica_id = c.replica_id
		WHERE c.state = 'RUNNING' AND c.graph_key IN (?) AND c.attempt_id > ? AND c.attempt_id <> ALL(?::bigint[])`+lanePin("c", lane)+`
			AND (c.deadline <= t.now OR c.heartbeat_deadline <= t.now OR r.replica_id IS NULL OR NOT r.live
				OR c.claimed_at < r.started_at)
		ORDER BY c.attempt_id
		LIMIT ?`), s.clock.NowOrNil(), ReasonDeadline, ReasonHeartbeat, pgdialect.Array(ids), pgdialect.Array(live),
			pgdialect.Array(started), bun.List(s.keys), after, pgdialect.Array(skip), limit).Scan(ctx, &found)
		if err != nil && !isNoRows(err) {
			return nil, fmt.Errorf("finding expired computations: %w", err)
		}
		rows = append(rows, found...)
	}
	if len(lanes) > 1 {
		slices.SortFunc(rows, func(a, b expired) int { return cmp.Compare(a.ID, b.ID) })
		rows = rows[:min(len(rows), limit)]
	}
	return rows, nil
}

// The sweep tries to abandon an attempt abandonGiveUp times at most, with its execution (the
// retry, or the node's failure); then it abandons it alone. Between two tries, the attempt sits
// out 1, 2, 4… passes, abandonBackoffCap at most: about ten minutes in all at the default
// interval.
const (
	abandonGiveUp     = 8
	abandonBackoffCap = 64
)

// gaveUp is the part of an attempt's error that says the sweep abandoned it alone.
const gaveUp = "; the sweep could not retry it or fail its node"

// abandonFailures remembers, across the passes of this replica, the expired attempts that it
// failed to abandon, so that they cannot fill each pass: each sits out the passes after a
// failure, more of them the more it has failed.
type abandonFailures struct {
	mu     sync.Mutex
	pass   int64
	failed map[int64]abandonFailure
}

type abandonFailure struct {
	count int   // the failures in a row
	next  int64 // the first pass that tries it again
}

// begin starts a pass: it returns its number, and the attempts that sit it out.
func (f *abandonFailures) begin() (pass int64, skip []int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pass++
	skip = []int64{} // an empty array, not NULL: <> ALL(NULL) holds for no row
	for id, a := range f.failed {
		if a.next > f.pass {
			skip = append(skip, id)
		}
	}
	return f.pass, skip
}

// fail records that pass failed to abandon id: it returns the failures in a row, and the passes
// the attempt sits out.
func (f *abandonFailures) fail(id, pass int64) (count int, wait int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed == nil {
		f.failed = map[int64]abandonFailure{}
	}
	a := f.failed[id]
	a.count++
	wait = min(int64(1)<<min(a.count-1, 30), abandonBackoffCap)
	a.next = pass + wait + 1
	f.failed[id] = a
	return a.count, wait
}

// forget forgets id: it was abandoned, or needs it no more.
func (f *abandonFailures) forget(id int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.failed, id)
}

// forgetGone forgets the attempts that pass, which saw every expired attempt, could try and did
// not find: they have finished, or were released.
func (f *abandonFailures) forgetGone(pass int64, tried map[int64]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, a := range f.failed {
		if a.next <= pass && !tried[id] {
			delete(f.failed, id)
		}
	}
}

// abandonFailed follows pass's failure to abandon row, with cause: it logs it, and the attempt
// sits out the next passes, or, once it has failed abandonGiveUp times in a row, is abandoned
// alone. It returns the attempt if it abandoned it.
func (s *Store) abandonFailed(ctx context.Context, pass int64, row expired, cause error) *Computation {
	count, wait := s.abandoning.fail(row.ID, pass)
	log := s.logger.With("service", "sweeper", "computation_id", row.ID, "execution_id", row.ExecutionID,
		"reason", row.Reason, "failures", count)
	if count < abandonGiveUp {
		log.Error("abandoning a computation failed; the sweep goes on, and tries it again later",
			"retry_in_passes", wait, "error", cause)
		return nil
	}
	c, err := s.abandonAlone(ctx, row, count, cause)
	switch {
	case err != nil:
		log.Error("abandoning a computation failed, and abandoning it alone too; the sweep tries again later",
			"retry_in_passes", wait, "error", cause, "alone_error", err)
		return nil
	case c != nil:
		log.Error("abandoning a computation failed every time: it is abandoned alone, and its node has failed",
			"error", cause)
	}
	s.abandoning.forget(row.ID)
	return c
}

// abandonAlone abandons an attempt still RUNNING under the same claim, without its execution:
// nothing retries it, and its error, which says so and why, is its node's failure. It is for an
// attempt whose abandonment with its execution failed every time: the execution cannot be
// written, and the attempt must not keep its slot, or come back at every pass, for ever. It
// returns nil if the attempt was no longer to abandon.
func (s *Store) abandonAlone(ctx context.Context, row expired, failures int, cause error) (*Computation, error) {
	msg := machine.Storable(fmt.Sprintf("%s%s (%d tries), and abandoned it alone: %v", row.Reason, gaveUp, failures, cause))
	var got []*Computation
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if err := s.boundLocks(ctx, tx); err != nil {
			return err
		}
		err := tx.NewRaw(s.q(`UPDATE {s}.nodes n SET state = 'ABANDONED', error = ?, finished_at = coalesce(?::timestamptz, now())
			WHERE n.lane = ? AND n.execution_id = ? AND n.node = ? AND `+machine.Held.SQL("n", "", "")+` AND n.claim_token = ?::uuid
			RETURNING `+attemptColumns), msg, s.clock.NowOrNil(), row.Lane, row.ExecutionID, row.Node, row.ClaimToken).Scan(ctx, &got)
		if isNoRows(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("abandoning computation %d alone: %w", row.ID, err)
	}
	if len(got) == 0 {
		return nil, nil
	}
	return got[0], nil
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
	// A writer that holds the execution's lock (its completion, say) is waited for, as long as
	// the lock timeout: the attempt is then found finished, or fails to abandon this pass.
	err = s.write(ctx, row.ExecutionID, s.boundLocks, func(_ context.Context, _ *txn, p *machine.Plan, env machine.Env) error {
		if c = p.Latest(row.Node); c != nil && s.hooks.Abandoning != nil && c.State == StateRunning && deref(c.ClaimToken) == deref(row.ClaimToken) {
			s.hooks.Abandoning(c)
		}
		return p.Step(machine.Abandon{Node: row.Node, Token: deref(row.ClaimToken), Reason: row.Reason}, env)
	})
	if errors.Is(err, machine.ErrNothingToDo) {
		return nil, nil
	}
	return c, err
}
