package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/telemetry"
	"github.com/journey-go/journey/persistence/machine"
)

// nodeRow is a row of the nodes table: a node of an execution, its value, and its current
// attempt. A node without a value has ValueRev not valid; one that never had an attempt (an
// input), AttemptID not valid. Its nullable columns are pgtype's values, which pgx scans into
// without an allocation each.
type nodeRow struct {
	Lane        int16     `db:"lane" bun:"lane"`
	ExecutionID string    `db:"execution_id" bun:"execution_id"`
	Node        string    `db:"node" bun:"node"`
	GraphKey    string    `db:"graph_key" bun:"graph_key"`
	Rev         int64     `db:"rev" bun:"rev"`
	ChangedAt   time.Time `db:"changed_at" bun:"changed_at"`
	// The value.
	Value    json.RawMessage    `db:"value" bun:"value"`
	Metadata json.RawMessage    `db:"metadata" bun:"metadata"`
	ValueRev pgtype.Int8        `db:"value_rev" bun:"value_rev"`
	SetAt    pgtype.Timestamptz `db:"set_at" bun:"set_at"`
	Hseq     int64              `db:"hseq" bun:"hseq"`
	// The current attempt.
	AttemptID          pgtype.Int8        `db:"attempt_id" bun:"attempt_id"`
	State              pgtype.Text        `db:"state" bun:"state"`
	Attempt            pgtype.Int4        `db:"attempt" bun:"attempt"`
	MaxAttempts        pgtype.Int4        `db:"max_attempts" bun:"max_attempts"`
	ReplicaID          pgtype.Text        `db:"replica_id" bun:"replica_id"`
	ClaimToken         pgtype.Text        `db:"claim_token" bun:"claim_token"`
	RunAt              pgtype.Timestamptz `db:"run_at" bun:"run_at"`
	ClaimedAt          pgtype.Timestamptz `db:"claimed_at" bun:"claimed_at"`
	Deadline           pgtype.Timestamptz `db:"deadline" bun:"deadline"`
	HeartbeatDeadline  pgtype.Timestamptz `db:"heartbeat_deadline" bun:"heartbeat_deadline"`
	LastHeartbeatAt    pgtype.Timestamptz `db:"last_heartbeat_at" bun:"last_heartbeat_at"`
	AbandonAfterMS     pgtype.Int8        `db:"abandon_after_ms" bun:"abandon_after_ms"`
	HeartbeatTimeoutMS pgtype.Int8        `db:"heartbeat_timeout_ms" bun:"heartbeat_timeout_ms"`
	ComputedWith       pgtype.Text        `db:"computed_with" bun:"computed_with"`
	Error              pgtype.Text        `db:"error" bun:"error"`
	ConcurrencyKey     pgtype.Text        `db:"concurrency_key" bun:"concurrency_key"`
	MaxParallel        pgtype.Int4        `db:"max_parallel" bun:"max_parallel"`
	CreatedAt          pgtype.Timestamptz `db:"created_at" bun:"created_at"`
	FinishedAt         pgtype.Timestamptz `db:"finished_at" bun:"finished_at"`
	AvailableAt        pgtype.Timestamptz `db:"available_at" bun:"available_at"`
	Traceparent        pgtype.Text        `db:"traceparent" bun:"traceparent"`
	RateKey            pgtype.Text        `db:"rate_key" bun:"rate_key"`
}

// nodeColumns are the columns of nodeRow, in the order of the nodes table.
var nodeColumns = dbColumns[nodeRow]()

// value is the row's value; the row has one.
func (r *nodeRow) value() graph.Value {
	meta := r.Metadata
	if string(meta) == "null" {
		meta = nil
	}
	return graph.Value{Raw: r.Value, Revision: r.ValueRev.Int64, SetAt: r.SetAt.Time, Metadata: meta}
}

// attempt is the row's current attempt, nil if it has none. Its nullable fields point into the
// row.
func (r *nodeRow) attempt() *Computation {
	if !r.AttemptID.Valid {
		return nil
	}
	c := &Computation{
		ID: r.AttemptID.Int64, Lane: r.Lane, ExecutionID: r.ExecutionID, GraphKey: r.GraphKey, Node: r.Node, State: r.State.String,
		Attempt: int(r.Attempt.Int32), MaxAttempts: int(r.MaxAttempts.Int32), ReplicaID: textOf(&r.ReplicaID),
		ClaimToken: textOf(&r.ClaimToken), RunAt: r.RunAt.Time, ClaimedAt: timeOf(&r.ClaimedAt), Deadline: timeOf(&r.Deadline),
		HeartbeatDeadline: timeOf(&r.HeartbeatDeadline), LastHeartbeatAt: timeOf(&r.LastHeartbeatAt),
		AbandonAfterMS: r.AbandonAfterMS.Int64, HeartbeatTimeoutMS: r.HeartbeatTimeoutMS.Int64,
		ComputedWith: cmpOr(r.ComputedWith.String, "{}"), Error: textOf(&r.Error), ConcurrencyKey: textOf(&r.ConcurrencyKey),
		CreatedAt: r.CreatedAt.Time, FinishedAt: timeOf(&r.FinishedAt), AvailableAt: timeOf(&r.AvailableAt),
		Traceparent: textOf(&r.Traceparent), RateKey: textOf(&r.RateKey),
	}
	if r.MaxParallel.Valid {
		n := int(r.MaxParallel.Int32)
		c.MaxParallel = &n
	}
	return c
}

// textOf points at t's string, nil if t is NULL.
func textOf(t *pgtype.Text) *string {
	if !t.Valid {
		return nil
	}
	return &t.String
}

// timeOf points at t's time, nil if t is NULL.
func timeOf(t *pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	return &t.Time
}

func derefInt(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func derefInt64(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func derefTime(p *time.Time) time.Time {
	if p == nil {
		return time.Time{}
	}
	return *p
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// lockedExecution is an executions row locked for writing, with the transaction's time: every
// time the write stamps is it, so that what one transaction writes carries one time. (The
// deadlines of a claim the write makes are the writing statement's: see nodeRows.)
type lockedExecution struct {
	Execution
	Now time.Time `bun:"tx_now" db:"tx_now"`
}

// load locks the executions ids, in (lane, id) order so that two writers of several executions
// never wait on each other, and reads their node rows, in one round trip (with the BEGIN, if it
// has not gone), one statement per table whatever the number of executions: the node rows are
// read by a statement of their own, whose snapshot is taken once the locks are held. before goes
// ahead of the lock, and then between the lock and the read. It returns the executions in the
// order of the locks, and the transaction's time; an id may be given twice.
func (s *Store) load(ctx context.Context, t *txn, ids []string, before, then []step) ([]*machine.Loaded, time.Time, error) {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	lanes := make([]int16, len(ids))
	for i, id := range ids {
		lanes[i] = LaneOf(id)
	}
	// (lane, id) order: the order of the primary key, the order every writer locks in.
	order := make([]int, len(ids))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if lanes[a] != lanes[b] {
			return int(lanes[a]) - int(lanes[b])
		}
		return strings.Compare(ids[a], ids[b])
	})
	sortedIDs, sortedLanes := make([]string, len(ids)), make([]int16, len(ids))
	for i, j := range order {
		sortedIDs[i], sortedLanes[i] = ids[j], lanes[j]
	}
	var rows []*lockedExecution
	var nodes []*nodeRow
	// The locks are taken in the order of the primary key, as every writer takes them.
	var locks, reads []step
	for i, j := 0, 0; i < len(sortedIDs); i = j {
		j = s.runEnd(sortedLanes, i)
		lanes, ids := sortedLanes[i:j], sortedIDs[i:j]
		locks = append(locks, step{s.q(`SELECT ` + cols("e", executionColumns) + `, coalesce($1::timestamptz, now()) AS tx_now
			FROM ` + executionKeys("$2", "$3") + ` k JOIN {s}.executions e ON e.lane = k.lane AND e.id = k.id` + s.pinned("e", "$2") + `
			ORDER BY e.lane, e.id FOR UPDATE OF e`), []any{s.clock.NowOrNil(), lanes, ids}, collect(&rows)})
		reads = append(reads, step{s.q(`SELECT ` + cols("n", nodeColumns) + ` FROM unnest($1::smallint[], $2::text[]) AS k(lane, id)
			JOIN {s}.nodes n ON n.lane = k.lane AND n.execution_id = k.id` + s.pinned("n", "$1")), []any{lanes, ids}, collect(&nodes)})
	}
	err := t.send(ctx, slices.Concat(before, locks, then, reads)...)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("loading executions %s: %w", strings.Join(ids, ", "), err)
	}
	if len(rows) < len(ids) {
		found := make(map[string]bool, len(rows))
		for _, r := range rows {
			found[r.ID] = true
		}
		for _, id := range sortedIDs {
			if !found[id] {
				return nil, time.Time{}, fmt.Errorf("%w: %q", ErrNotFound, id)
			}
		}
	}
	byID := make(map[string][]*nodeRow, len(rows))
	for _, n := range nodes {
		byID[n.ExecutionID] = append(byID[n.ExecutionID], n)
	}
	out := make([]*machine.Loaded, len(rows))
	for i, row := range rows {
		g, ok := s.Graph(row.GraphName, row.GraphVersion)
		if !ok {
			return nil, time.Time{}, fmt.Errorf("%w: execution %s belongs to graph %q version %q, which this replica does not serve",
				ErrUnknownGraph, row.ID, row.GraphName, row.GraphVersion)
		}
		out[i] = loaded(row.Execution, g, byID[row.ID])
	}
	var now time.Time
	if len(rows) > 0 {
		now = rows[0].Now
	}
	return out, now, nil
}

// freshen reads again the node rows of xs, executions loaded in an application's transaction of
// REPEATABLE READ or SERIALIZABLE, whose locks it holds, outside that transaction: the rows as
// committed, which the transaction's snapshot, taken before its locks, may not show. Each node
// keeps the newer of its two rows, by revision: the committed one, or the one the transaction
// wrote itself (a second Set of one execution in one transaction), which no other can have
// changed since, under the execution's lock. The transaction's writes of rows that changed after
// its snapshot would fail with a serialization error, which the application retries: a Set there
// writes its input values alone, and its advance follows the commit (see machine.Set.Defer).
func (s *Store) freshen(ctx context.Context, xs []*machine.Loaded) error {
	lanes, ids := make([]int16, len(xs)), make([]string, len(xs))
	for i, x := range xs {
		lanes[i], ids[i] = x.Exec.Lane, x.Exec.ID
	}
	var rows []*nodeRow
	err := s.db.NewRaw(s.q(`SELECT `+cols("n", nodeColumns)+` FROM `+executionKeys("?0", "?1")+` k
		JOIN {s}.nodes n ON n.lane = k.lane AND n.execution_id = k.id`+s.pinned("n", "?0")),
		pgdialect.Array(lanes), pgdialect.Array(ids)).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return fmt.Errorf("reading the committed rows of executions %s: %w", strings.Join(ids, ", "), err)
	}
	byID := make(map[string][]*nodeRow, len(xs))
	for _, r := range rows {
		byID[r.ExecutionID] = append(byID[r.ExecutionID], r)
	}
	for i, x := range xs {
		fresh := loaded(x.Exec, x.Graph, byID[x.Exec.ID])
		mine := make(map[string]int, len(x.Rows))
		for j, r := range x.Rows {
			mine[r.Node] = j
		}
		for _, r := range fresh.Rows {
			j, ok := mine[r.Node]
			switch {
			case !ok:
				x.Rows = append(x.Rows, r)
			case r.Rev > x.Rows[j].Rev:
				x.Rows[j] = r
			}
		}
		xs[i] = x
	}
	return nil
}

// loaded is execution e of graph g, with its node rows, as a step reads it.
func loaded(e Execution, g *graph.Graph, rows []*nodeRow) *machine.Loaded {
	x := &machine.Loaded{Exec: e, Graph: g, GraphKey: internedKey(e.GraphName, e.GraphVersion), Rows: make([]machine.Row, len(rows))}
	for i, r := range rows {
		x.Rows[i] = machine.Row{Node: r.Node, GraphKey: r.GraphKey, Rev: r.Rev, Hseq: r.Hseq, Attempt: r.attempt()}
		if r.ValueRev.Valid {
			v := r.value()
			x.Rows[i].Value = &v
		}
	}
	return x
}

// env is the environment of the steps of a write at time now, of an execution of graph version
// key.
func (s *Store) env(ctx context.Context, now time.Time, key string) machine.Env {
	return machine.Env{Now: now, NewID: newAttemptID, NewToken: NewUUID, Held: s.held(key), Traceparent: telemetry.Traceparent(ctx)}
}

// graphKeys are the GraphKeys internedKey has made, at most maxInterned of them.
var graphKeys = struct {
	sync.RWMutex
	m map[[2]string]string
}{m: map[[2]string]string{}}

// internedKey returns GraphKey(name, version), made once for each graph version.
func internedKey(name, version string) string {
	graphKeys.RLock()
	key, ok := graphKeys.m[[2]string{name, version}]
	graphKeys.RUnlock()
	if ok {
		return key
	}
	key = GraphKey(name, version)
	graphKeys.Lock()
	if len(graphKeys.m) < maxInterned {
		graphKeys.m[[2]string{name, version}] = key
	}
	graphKeys.Unlock()
	return key
}

// attemptIDs makes the ids of new attempts: the time in milliseconds, then a counter that this
// process starts at random, so that ids made later sort after, and two processes' ids made in
// the same millisecond differ.
var attemptIDs atomic.Uint64

func init() { attemptIDs.Store(uint64(randomLane()) << 14) }

// newAttemptID returns the id of a new attempt: unique, and greater than any id that a release
// before attempt ids were made in Go (a sequence) gave.
func newAttemptID() int64 {
	return time.Now().UnixMilli()<<20 | int64(attemptIDs.Add(1)&(1<<20-1))
}
