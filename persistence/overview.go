package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// exactBelow is the estimated size of the executions table below which Overview counts the
// executions of each graph version exactly; above it, it takes the planner's estimates.
const exactBelow = 50_000

// Overview is the state of a schema at a glance, read from indexes and planner estimates only,
// so that it takes milliseconds whatever the size of the executions table.
type Overview struct {
	// Graphs are the recorded graph versions. Their failed, running and waiting counts are
	// exact; their Executions and archived counts are estimates when Estimated is true.
	Graphs []GraphSummary `json:"graphs"`
	// Estimated is true when the executions table holds about 50,000 rows or more, and the
	// totals of Graphs are the planner's estimates.
	Estimated bool `json:"estimated"`
	// Computations counts the active attempts by state: PENDING, AVAILABLE and RUNNING.
	Computations map[string]int64 `json:"computations"`
	// FailedLastHour counts the executions whose failure was claimed in the last hour.
	FailedLastHour int64 `json:"failed_last_hour"`
	// DeadDeliveries counts the notification deliveries that were given up (DEAD).
	DeadDeliveries int64 `json:"dead_deliveries"`
	// Replicas are the replicas that heartbeat in the schema (ReplicaStatuses).
	Replicas []ReplicaStatus `json:"replicas"`
}

// Overview reads the state of the schema at a glance. Each count reads a partial index, and the
// totals of large tables are the planner's estimates (see exactBelow).
//
// EXPLAIN ANALYZE of its reads with 1M executions of two graph versions (1000 failed, 50
// running, 200 waiting, 1000 DEAD deliveries), on a busy 2-core machine; the dashboard's overview
// page answers in 21-171 ms (median 58 ms) in all:
//
//	the failed, running and waiting counts (activeStatesQuery), 72 ms:
//	  GroupAggregate (rows=3)
//	    ->  Nested Loop (rows=1250)
//	          ->  HashAggregate: the candidates, an Append of
//	                Index Only Scan using notification_claims_failed_idx (rows=1000)
//	                Index Scan using computations_running_replica_idx (rows=50)
//	                Bitmap Heap Scan: BitmapOr of computations_pending_idx and computations_claim_idx (rows=200)
//	          ->  Index Scan using executions_pkey on executions e (rows=1 loops=1250)
//	                SubPlans: the state of each, on the same partial indexes and computations_execution_idx
//	the totals, EXPLAIN only (no row read) of each graph version, on executions_graph_stats:
//	  Index Only Scan using executions_graph_idx (rows=253433; the true count is 250000)
//	the active computations, 0.4 ms: an Index Only Scan of computations_pending_idx,
//	  computations_claim_idx and computations_running_replica_idx each
//	the failures of the last hour, 18 ms: Index Scan using notification_claims_failed_idx, filtered
//	  on claimed_at (rows=71, 929 removed)
//	the DEAD deliveries, 2 ms: Index Only Scan using notification_deliveries_dead_idx (rows=1000)
func (s *Store) Overview(ctx context.Context) (*Overview, error) {
	size, err := s.estimate(ctx, `SELECT 1 FROM {s}.executions`)
	if err != nil {
		return nil, err
	}
	// On Citus, the coordinator's planner does not know the shards' sizes (it guesses 100,000
	// rows for any distributed scan): the workers count, each its shards, in parallel.
	o := &Overview{Estimated: size >= exactBelow && !s.citus}
	totals := s.countTotals
	if o.Estimated {
		totals = s.estimateTotals
	}
	if o.Graphs, err = s.graphSummaries(ctx, totals); err != nil {
		return nil, err
	}
	var counts []struct {
		State string `bun:"state"`
		N     int64  `bun:"n"`
	}
	// One count per state, each an index-only scan of its partial index.
	err = s.db.NewRaw(s.q(`SELECT 'PENDING' AS state, count(*) AS n FROM {s}.nodes WHERE state = 'PENDING'
		UNION ALL SELECT 'AVAILABLE', count(*) FROM {s}.nodes WHERE state = 'AVAILABLE'
		UNION ALL SELECT 'RUNNING', count(*) FROM {s}.nodes WHERE state = 'RUNNING'`)).Scan(ctx, &counts)
	if err != nil {
		return nil, fmt.Errorf("counting the active computations: %w", err)
	}
	o.Computations = map[string]int64{}
	for _, c := range counts {
		o.Computations[c.State] = c.N
	}
	err = s.db.NewRaw(s.q(`SELECT
			(SELECT count(*) FROM {s}.notification_claims WHERE event = 'execution.failed'
				AND claimed_at > coalesce(?::timestamptz, now()) - interval '1 hour'),
			(SELECT count(*) FROM {s}.notification_deliveries WHERE state = 'DEAD')`),
		s.clock.NowOrNil()).Scan(ctx, &o.FailedLastHour, &o.DeadDeliveries)
	if err != nil {
		return nil, fmt.Errorf("counting the recent failures and the dead deliveries: %w", err)
	}
	if o.Replicas, err = s.ReplicaStatuses(ctx); err != nil {
		return nil, err
	}
	return o, nil
}

// estimateTotals estimates the executions of each graph version, and the archived ones, from the
// planner's statistics, without reading the table.
func (s *Store) estimateTotals(ctx context.Context, graphs []GraphSummary) ([]graphTotal, error) {
	out := make([]graphTotal, 0, len(graphs))
	for _, g := range graphs {
		t := graphTotal{Name: g.Name, Version: g.Version}
		var err error
		const where = `SELECT 1 FROM {s}.executions WHERE graph_name = ? AND graph_version = ?`
		if t.N, err = s.estimate(ctx, where, g.Name, g.Version); err == nil {
			t.Archived, err = s.estimate(ctx, where+` AND archived_at IS NOT NULL`, g.Name, g.Version)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// estimate returns the planner's estimate of the rows that query returns, without running it.
func (s *Store) estimate(ctx context.Context, query string, args ...any) (int64, error) {
	var plan string
	if err := s.db.NewRaw("EXPLAIN (FORMAT JSON) "+s.q(query), args...).Scan(ctx, &plan); err != nil {
		return 0, fmt.Errorf("estimating the executions: %w", err)
	}
	var out []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(plan), &out); err != nil || len(out) == 0 {
		return 0, fmt.Errorf("reading the planner's estimate: %w", errors.Join(err, errors.New("no plan")))
	}
	return int64(out[0].Plan.Rows), nil
}

// Reclaim is an attempt that the sweepers abandoned in the last hour, from the reclaim_history
// view: the audit trail of reclaimed work, with the reason.
type Reclaim struct {
	ID          int64      `bun:"id" json:"id"`
	ExecutionID string     `bun:"execution_id" json:"execution_id"`
	GraphKey    string     `bun:"graph_key" json:"graph"`
	Node        string     `bun:"node" json:"node"`
	Attempt     int        `bun:"attempt" json:"attempt"`
	MaxAttempts int        `bun:"max_attempts" json:"max_attempts"`
	ReplicaID   *string    `bun:"replica_id" json:"replica_id,omitempty"`
	Reason      *string    `bun:"reason" json:"reason,omitempty"`
	ClaimedAt   *time.Time `bun:"claimed_at" json:"claimed_at,omitempty"`
	AbandonedAt time.Time  `bun:"abandoned_at" json:"abandoned_at"`
	// Retried is true when a later attempt of the node exists.
	Retried bool `bun:"retried" json:"retried"`
}

// Reclaims lists up to limit reclaims of the last hour, newest first (a backward scan of
// computations_abandoned_idx).
func (s *Store) Reclaims(ctx context.Context, limit int) ([]Reclaim, error) {
	var out []Reclaim
	err := s.db.NewRaw(s.q(`SELECT `+cols("", reclaimColumns)+` FROM {s}.reclaim_history ORDER BY abandoned_at DESC, id DESC LIMIT ?`), limit).
		Scan(ctx, &out)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("listing the reclaims: %w", err)
	}
	return orEmpty(out), nil
}

// AwaitRequest polls request id until a replica has carried it out or wait has passed, and
// returns it as it last read it.
func (s *Store) AwaitRequest(ctx context.Context, id int64, wait time.Duration) (*Request, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last *Request
	for {
		req, err := s.LoadRequest(ctx, id)
		switch {
		case err == nil:
			last = req
			if req.DoneAt != nil {
				return req, nil
			}
		case errors.Is(ctx.Err(), context.DeadlineExceeded) && last != nil:
			return last, nil
		default:
			return nil, err
		}
		select {
		case <-ctx.Done():
			return last, nil
		case <-tick.C:
		}
	}
}

// ParseWhere reads a filter written node=value, as `journey executions list --where` and the
// dashboard take it: a value that is JSON (10, true, "x") is compared as JSON, any other text as
// a string.
func ParseWhere(s string) (Filter, error) {
	node, value, ok := strings.Cut(s, "=")
	if !ok || node == "" {
		return Filter{}, fmt.Errorf("bad filter %q: want node=value, such as email=ada@example.com or amount=10", s)
	}
	raw := json.RawMessage(value)
	if !json.Valid(raw) {
		raw, _ = json.Marshal(value) // a string always encodes
	}
	return Filter{Node: node, Op: OpEq, Value: raw}, nil
}
