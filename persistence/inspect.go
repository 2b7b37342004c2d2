package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun/dialect/pgdialect"
)

// The states of an execution, as operators see them. An execution is in the first that applies.
const (
	// ExecArchived: the execution is archived.
	ExecArchived = "archived"
	// ExecCanceled: the execution is canceled (Cancel).
	ExecCanceled = "canceled"
	// ExecPaused: the execution is paused (Pause).
	ExecPaused = "paused"
	// ExecFailed: a node has failed for good (see Failure), and no Retry has followed.
	ExecFailed = "failed"
	// ExecRunning: a computation is running.
	ExecRunning = "running"
	// ExecWaiting: a computation waits to run (PENDING or AVAILABLE), or a map node waits for its
	// children (WAITING).
	ExecWaiting = "waiting"
	// ExecCompleted: the graph's CompletesWhen gate has held with nothing left to run.
	ExecCompleted = "completed"
	// ExecIdle: nothing runs or waits to run; the execution waits for its inputs, if anything.
	ExecIdle = "idle"
)

// ExecStates are the states of an execution, in the order in which they apply.
var ExecStates = []string{ExecArchived, ExecCanceled, ExecPaused, ExecFailed, ExecRunning, ExecWaiting, ExecCompleted, ExecIdle}

// stateExpr computes the state of execution e. Each test is an index lookup on the execution.
const stateExpr = `CASE WHEN e.archived_at IS NOT NULL THEN 'archived'
	WHEN e.canceled_at IS NOT NULL THEN 'canceled'
	WHEN e.paused_at IS NOT NULL THEN 'paused'
	WHEN EXISTS (SELECT 1 FROM {s}.notification_claims n
		WHERE n.lane = e.lane AND n.execution_id = e.id AND n.event = 'execution.failed' AND n.phase = e.failure_phase) THEN 'failed'
	WHEN EXISTS (SELECT 1 FROM {s}.nodes c WHERE c.lane = e.lane AND c.execution_id = e.id AND c.state = 'RUNNING') THEN 'running'
	WHEN EXISTS (SELECT 1 FROM {s}.nodes c
		WHERE c.lane = e.lane AND c.execution_id = e.id AND (c.state = 'PENDING' OR c.state = 'AVAILABLE' OR c.state = 'WAITING')) THEN 'waiting'
	WHEN EXISTS (SELECT 1 FROM {s}.notification_claims n
		WHERE n.lane = e.lane AND n.execution_id = e.id AND n.event = 'execution.completed') THEN 'completed'
	ELSE 'idle' END`

// candidates are, for each state but idle, a set of execution ids that holds every execution in
// that state and that an index gives directly: the query filters them by stateExpr, instead of
// testing every execution of the table.
var candidates = map[string]string{
	ExecFailed:  `SELECT execution_id FROM {s}.notification_claims WHERE event = 'execution.failed'`,
	ExecRunning: `SELECT execution_id FROM {s}.nodes WHERE state = 'RUNNING'`,
	// OR, not IN: the planner ORs the two partial indexes in a bitmap for an OR only.
	ExecWaiting:   `SELECT execution_id FROM {s}.nodes WHERE state = 'PENDING' OR state = 'AVAILABLE' OR state = 'WAITING'`,
	ExecCompleted: `SELECT execution_id FROM {s}.notification_claims WHERE event = 'execution.completed'`,
}

// GraphSummary is a recorded graph version, with the live replicas that serve it and its
// executions counted by state.
type GraphSummary struct {
	GraphVersion
	// Replicas are the live replicas that serve it.
	Replicas []string `bun:"replicas,array" json:"replicas"`
	// Executions counts its executions, archived included.
	Executions int64 `bun:"executions" json:"executions"`
	// States counts its executions in the states archived, failed, running and waiting.
	States map[string]int64 `bun:"-" json:"states"`
	// ServingReplicas is the number of live replicas that serve it (len(Replicas)).
	ServingReplicas int `bun:"-" json:"serving_replicas"`
	// Waiting counts its unarchived executions with work left: an attempt running or waiting
	// to run. Only a replica that serves the version can run it.
	Waiting int64 `bun:"-" json:"waiting"`
	// UnservedSince, when no live replica serves the version, is when one last did: the last
	// heartbeat of a replica that serves it, or its graceful stop. Nil while one serves it.
	UnservedSince *time.Time `bun:"-" json:"unserved_since"`
	// Stranded: work waits (Waiting > 0) and no live replica serves the version. Keep or start
	// a replica that serves it until it drains, or move its executions to a compatible version
	// (MoveVersion).
	Stranded bool `bun:"-" json:"stranded"`

	// LastBeat is the newest heartbeat of a replica that serves it, live or stale.
	LastBeat *time.Time `bun:"last_beat" json:"-"`
}

// GraphSummaries lists the recorded graph versions, by name and then oldest first.
//
// The totals read the executions table once (a sequential scan: about 0.6s for 1M executions on
// a busy 2-core machine); Overview estimates them instead. The counts of failed, running and
// waiting executions read only the executions that the partial indexes of active computations
// and failure claims name.
func (s *Store) GraphSummaries(ctx context.Context) ([]GraphSummary, error) {
	return s.graphSummaries(ctx, s.countTotals)
}

// graphTotal counts the executions of a graph version, and the archived ones.
type graphTotal struct {
	Name     string `bun:"graph_name"`
	Version  string `bun:"graph_version"`
	N        int64  `bun:"n"`
	Archived int64  `bun:"archived"`
}

// graphSummaries lists the recorded graph versions, with their totals as totals gives them.
func (s *Store) graphSummaries(ctx context.Context, totals func(context.Context, []GraphSummary) ([]graphTotal, error)) ([]GraphSummary, error) {
	var out []GraphSummary
	err := s.db.NewRaw(s.q(`SELECT `+cols("v", versionColumns)+`,
			ARRAY(SELECT r.replica_id FROM {s}.replica_heartbeats r
				WHERE v.graph_name || '@' || v.graph_version = ANY(r.graphs) AND `+liveReplica+`
				ORDER BY r.replica_id) AS replicas,
			(SELECT max(r.last_heartbeat) FROM {s}.replica_heartbeats r
				WHERE v.graph_name || '@' || v.graph_version = ANY(r.graphs)) AS last_beat,
			0 AS executions
		FROM {s}.graph_versions v ORDER BY v.graph_name, v.first_seen_at, v.graph_version`), s.clock.NowOrNil()).Scan(ctx, &out)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("listing graph versions: %w", err)
	}
	out = orEmpty(out)
	counted, err := totals(ctx, out)
	if err != nil {
		return nil, err
	}
	var states []struct {
		Name    string `bun:"graph_name"`
		Version string `bun:"graph_version"`
		State   string `bun:"state"`
		N       int64  `bun:"n"`
	}
	err = s.db.NewRaw(s.q(activeStatesQuery)).Scan(ctx, &states)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("counting executions by graph and state: %w", err)
	}
	for i := range out {
		g := &out[i]
		g.States = map[string]int64{ExecArchived: 0, ExecFailed: 0, ExecRunning: 0, ExecWaiting: 0}
		for _, t := range counted {
			if t.Name == g.Name && t.Version == g.Version {
				g.Executions, g.States[ExecArchived] = t.N, t.Archived
			}
		}
		for _, c := range states {
			if c.Name == g.Name && c.Version == g.Version {
				g.States[c.State] = c.N
			}
		}
		g.ServingReplicas = len(g.Replicas)
		g.Waiting = g.States[ExecRunning] + g.States[ExecWaiting]
		if g.ServingReplicas == 0 {
			since := g.LastSeenAt
			if g.LastBeat != nil && g.LastBeat.After(since) {
				since = *g.LastBeat
			}
			g.UnservedSince = &since
			g.Stranded = g.Waiting > 0
		}
	}
	return out, nil
}

// activeStatesQuery counts the failed, running and waiting executions of each graph version,
// reading only the executions that the partial indexes of active computations and failure claims
// name.
var activeStatesQuery = `SELECT graph_name, graph_version, state, count(*) AS n FROM (
		SELECT e.graph_name, e.graph_version, ` + stateExpr + ` AS state FROM {s}.executions e
		WHERE e.archived_at IS NULL AND e.id IN (` + candidates[ExecFailed] + ` UNION ` +
	candidates[ExecRunning] + ` UNION ` + candidates[ExecWaiting] + `)) c
	WHERE state IN ('failed', 'running', 'waiting') GROUP BY graph_name, graph_version, state`

// countTotals counts the executions of every graph version, reading the whole table.
func (s *Store) countTotals(ctx context.Context, _ []GraphSummary) ([]graphTotal, error) {
	var totals []graphTotal
	err := s.db.NewRaw(s.q(`SELECT graph_name, graph_version, count(*) AS n,
			count(*) FILTER (WHERE archived_at IS NOT NULL) AS archived
		FROM {s}.executions GROUP BY graph_name, graph_version`)).Scan(ctx, &totals)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("counting executions by graph: %w", err)
	}
	return totals, nil
}

// ExecutionRow is an execution in a listing, with its state.
type ExecutionRow struct {
	ID         string     `bun:"id" json:"id"`
	Graph      string     `bun:"graph_name" json:"graph"`
	Version    string     `bun:"graph_version" json:"version"`
	Key        string     `bun:"key" json:"key,omitempty"` // the key it was started with, if any
	Revision   int64      `bun:"revision" json:"revision"`
	State      string     `bun:"state" json:"state"`
	CreatedAt  time.Time  `bun:"created_at" json:"created_at"`
	UpdatedAt  time.Time  `bun:"updated_at" json:"updated_at"`
	ArchivedAt *time.Time `bun:"archived_at" json:"archived_at,omitempty"`
	// CancelReason is why the execution was canceled, if it was.
	CancelReason *string `bun:"cancel_reason" json:"cancel_reason,omitempty"`
	// FailedNode, in the failed state, is the node that failed for good first, and FailedError
	// the first line of its error (see tidy).
	FailedNode  string `bun:"-" json:"failed_node,omitempty"`
	FailedError string `bun:"-" json:"failed_error,omitempty"`
	// Failed is the node that failed for good first, a newline, and the first line of its error,
	// as one lookup reads them; "" if none failed. tidy reads it.
	Failed string `bun:"failed" json:"-"`
}

// rowColumns are the columns of an ExecutionRow but its state, read from a row e of executions:
// with the node that failed for good first, if any, and the first line of its error, in one
// lookup (a node's name holds no newline).
const rowColumns = `e.id, e.graph_name, e.graph_version, e.key, e.revision, e.created_at, e.updated_at, e.archived_at,
	e.cancel_reason, coalesce((SELECT n.node || E'\n' || split_part(coalesce(n.error, ''), E'\n', 1) FROM {s}.nodes n
		WHERE n.lane = e.lane AND n.execution_id = e.id AND n.state IN ('FAILED', 'ABANDONED')
		ORDER BY n.finished_at, n.node LIMIT 1), '') AS failed`

// tidy sets the failed node of the rows in the failed state only: after a Retry, or in an
// execution canceled or archived, it is not why the execution stopped.
func tidy(rows []ExecutionRow) {
	for i := range rows {
		if rows[i].State == ExecFailed {
			rows[i].FailedNode, rows[i].FailedError, _ = strings.Cut(rows[i].Failed, "\n")
		}
	}
}

// Cursor is where a page of executions ends: the next page starts after it. Its text form is
// the creation time, a comma, and the id.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// String is the cursor's text form, which ParseCursor reads.
func (c Cursor) String() string { return c.CreatedAt.UTC().Format(time.RFC3339Nano) + "," + c.ID }

// ParseCursor reads a cursor's text form.
func ParseCursor(s string) (Cursor, error) {
	at, id, ok := strings.Cut(s, ",")
	t, err := time.Parse(time.RFC3339Nano, at)
	if !ok || err != nil || id == "" || CheckText("cursor", id) != nil {
		return Cursor{}, fmt.Errorf("journey: bad cursor %q: pass on the one a listing printed, such as 2025-01-02T15:04:05.123456Z,EXEC1", s)
	}
	return Cursor{CreatedAt: t, ID: id}, nil
}

// ExecutionFilter selects a page of executions, newest first.
type ExecutionFilter struct {
	// Graph and Version, if set, keep the executions of that graph (and version).
	Graph, Version string
	// Key, if set, keeps the executions started with that key: the one that holds it, and, with
	// Archived, those that held it before.
	Key string
	// Where keeps the executions whose nodes have these values (OpEq filters and the others of
	// ListQuery).
	Where []Filter
	// State, if set, keeps the executions in that state (one of ExecStates).
	State string
	// Archived includes the archived executions. State ExecArchived implies it.
	Archived bool
	// Limit is the page size. Default 50.
	Limit int
	// After, if set, starts the page after this cursor.
	After *Cursor
}

// ExecutionPage is a page of executions, and the cursor of the next page if there is one.
type ExecutionPage struct {
	Executions []ExecutionRow `json:"executions"`
	Next       *Cursor        `json:"-"`
}

// ListPage returns a page of the executions that f selects, newest first, keyset-paged on
// (created_at, id). It checks f against the recorded graph versions: an unknown graph, version,
// node or state is an error that says so, rather than an empty page.
//
// EXPLAIN ANALYZE of a page after a cursor, unfiltered, with 1M executions (0.9 ms; the first
// page 3 ms, a graph and version 0.9 ms, --state failed with 1000 failed 70 ms):
//
//	Subquery Scan on e (actual time=0.745..0.770 rows=51 loops=1)
//	  ->  Limit (actual time=0.007..0.020 rows=51 loops=1)
//	        ->  Index Scan Backward using executions_created_idx on executions e_1 (rows=51 loops=1)
//	              Index Cond: (ROW(created_at, id) < ROW('2026-11-23 07:52:42.410136+00', 'EX00000003'))
//	              Filter: (archived_at IS NULL)
//	  SubPlan 2 .. SubPlan 8: the state of the 51 rows, from notification_claims_failed_idx,
//	        computations_running_replica_idx, and computations_pending_idx OR computations_claim_idx
//	Execution Time: 0.908 ms
//
// With Graph and Version it walks executions_graph_idx backwards (an incremental sort on id),
// and with a State it starts from that state's candidates (a partial index), joined to
// executions_pkey.
func (s *Store) ListPage(ctx context.Context, f ExecutionFilter) (*ExecutionPage, error) {
	if err := s.checkFilter(ctx, f); err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	from, args, err := s.where(ListQuery{Graph: f.Graph, Version: f.Version, Key: f.Key, Filters: f.Where,
		IncludeArchived: f.Archived, State: f.State})
	if err != nil {
		return nil, err
	}
	if f.After != nil {
		from += " AND (e.created_at, e.id) < (?, ?)"
		args = append(args, f.After.CreatedAt, f.After.ID)
	}
	// The state of each row is computed on the page alone, outside the LIMIT, so that the
	// planner looks each one up by the execution's id.
	// Citus cannot join a page, which it gathers on the coordinator, with the tables: there, the
	// state of each row is computed on its shard, and the shards' pages are merged.
	query := "SELECT " + rowColumns + ", " + stateExpr + " AS state FROM (SELECT " + s.executionRead("e", "") + " FROM (SELECT " +
		cols("e", executionColumns) + from + " ORDER BY e.created_at DESC, e.id DESC LIMIT ?) e) e ORDER BY e.created_at DESC, e.id DESC"
	if s.citus {
		query = "SELECT " + cols("e", tableColumns[ExecutionRow]()) + " FROM (SELECT " + rowColumns + ", " + stateExpr + " AS state FROM (SELECT " + s.executionRead("e", "") + from +
			") e ORDER BY e.created_at DESC, e.id DESC LIMIT ?) e ORDER BY e.created_at DESC, e.id DESC"
	}
	args = append(args, limit+1)
	var rows []ExecutionRow
	if err := s.db.NewRaw(s.q(query), args...).Scan(ctx, &rows); err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("listing executions: %w", err)
	}
	tidy(rows)
	page := &ExecutionPage{Executions: rows}
	if len(rows) > limit {
		page.Executions = rows[:limit]
		last := rows[limit-1]
		page.Next = &Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	if page.Executions == nil {
		page.Executions = []ExecutionRow{}
	}
	return page, nil
}

// stateClause is the condition that keeps the executions e in state, from its candidates (a
// partial index), and its arguments.
func (s *Store) stateClause(state string) (string, []any) {
	var from string
	switch {
	case state == "":
		return "", nil
	case state == ExecArchived:
		return " AND e.archived_at IS NOT NULL", nil
	case state == ExecIdle:
		return " AND (" + stateExpr + ") = 'idle'", nil
	case state == ExecCanceled: // executions_canceled_idx
		return " AND e.canceled_at IS NOT NULL AND e.archived_at IS NULL", nil
	case state == ExecPaused: // executions_paused_idx
		return " AND e.paused_at IS NOT NULL AND e.canceled_at IS NULL AND e.archived_at IS NULL", nil
	case s.citus: // a join on the distribution column, which Citus sends to each shard
		from = " AND (e.lane, e.id) IN (" + strings.Replace(candidates[state], "execution_id", "lane, execution_id", 1) + ")"
	default:
		from = " AND e.id IN (" + candidates[state] + ")"
	}
	return from + " AND (" + stateExpr + ") = ?", []any{state}
}

// checkFilter reports what in f names nothing that exists.
func (s *Store) checkFilter(ctx context.Context, f ExecutionFilter) error {
	if err := checkTexts("graph", f.Graph, "version", f.Version, "key", f.Key, "state", f.State); err != nil {
		return err
	}
	if err := checkFilters(f.Where); err != nil {
		return err
	}
	if f.State != "" && !slices.Contains(ExecStates, f.State) {
		return fmt.Errorf("%w: unknown state %q: use one of %s", ErrBadRequest, f.State, strings.Join(ExecStates, ", "))
	}
	if f.Version != "" && f.Graph == "" {
		return fmt.Errorf("%w: a version (%q) needs a graph name too", ErrBadRequest, f.Version)
	}
	if f.Graph == "" && len(f.Where) == 0 {
		return nil
	}
	var versions []GraphVersion
	err := s.db.NewRaw(s.q(`SELECT `+cols("", versionColumns)+` FROM {s}.graph_versions
		WHERE (? = '' OR graph_name = ?) AND (? = '' OR graph_version = ?)`),
		f.Graph, f.Graph, f.Version, f.Version).Scan(ctx, &versions)
	if err != nil && !isNoRows(err) {
		return fmt.Errorf("reading the graph versions: %w", err)
	}
	if f.Graph != "" && len(versions) == 0 {
		what := fmt.Sprintf("graph %q", f.Graph)
		if f.Version != "" {
			what += fmt.Sprintf(" version %q", f.Version)
		}
		return fmt.Errorf("%w: no replica has recorded %s in schema %s; `journey graphs` lists the graphs",
			ErrUnknownGraph, what, s.schema)
	}
	for _, w := range f.Where {
		known := slices.ContainsFunc(versions, func(v GraphVersion) bool { _, ok := v.Node(w.Node); return ok })
		if !known {
			return fmt.Errorf("%w: no recorded graph version has a node %q; `journey graphs --json` lists the nodes",
				ErrUnknownNode, w.Node)
		}
	}
	return nil
}

// Value is a value of an execution, for inspection.
type Value struct {
	Node     string          `bun:"node" json:"node"`
	Value    json.RawMessage `bun:"value" json:"value"`
	Metadata json.RawMessage `bun:"metadata" json:"metadata,omitempty"`
	Revision int64           `bun:"revision" json:"revision"`
	SetAt    time.Time       `bun:"set_at" json:"set_at"`
}

// Waiting says what a node without a value waits for.
type Waiting struct {
	Node string `json:"node"`
	Kind string `json:"kind"`
	Gate string `json:"gate,omitempty"`
	// Reason is readable text, such as `gate needs(email): "email" is not set`.
	Reason string `json:"reason"`
}

// Attempt is one attempt of a computation, for inspection.
type Attempt struct {
	ID          int64      `bun:"id" json:"id"`
	Node        string     `bun:"node" json:"node"`
	State       string     `bun:"state" json:"state"`
	Attempt     int        `bun:"attempt" json:"attempt"`
	MaxAttempts int        `bun:"max_attempts" json:"max_attempts"`
	ReplicaID   *string    `bun:"replica_id" json:"replica_id,omitempty"`
	RunAt       time.Time  `bun:"run_at" json:"run_at"`
	ClaimedAt   *time.Time `bun:"claimed_at" json:"claimed_at,omitempty"`
	FinishedAt  *time.Time `bun:"finished_at" json:"finished_at,omitempty"`
	Error       *string    `bun:"error" json:"error,omitempty"`
	CreatedAt   time.Time  `bun:"created_at" json:"created_at"`
}

// ExecutionDetail is everything an operator can learn about one execution without its graph's
// Go code.
type ExecutionDetail struct {
	Execution ExecutionRow `json:"execution"`
	// Graph is the recorded graph version, nil if no replica has recorded it.
	Graph         *GraphVersion `json:"-"`
	Values        []Value       `json:"values"`
	Waiting       []Waiting     `json:"waiting"`
	Attempts      []Attempt     `json:"attempts"`
	Notifications []Claim       `json:"notifications"`
	History       []Change      `json:"history"`
	Requests      []Request     `json:"requests"`
	// Parent is, for a child execution, its parent's map node; Maps are the execution's own map
	// nodes that started children, with their progress and children.
	Parent *Parent   `json:"parent,omitempty"`
	Maps   []MapView `json:"maps"`
}

// MapView is a map node's progress (graph.Map, graph.Child): how many children its generation
// started, how many have ended, and the first of them, in order.
type MapView struct {
	Node     string     `bun:"node" json:"node"`
	Gen      int64      `bun:"gen" json:"gen"`
	Total    int        `bun:"total" json:"total"`
	Done     int        `bun:"done" json:"done"`
	Children []ChildRow `bun:"-" json:"children"`
}

// ChildRow is a child execution as its parent's detail lists it.
type ChildRow struct {
	ID    string `bun:"id" json:"id"`
	Index int    `bun:"index" json:"index"`
	State string `bun:"state" json:"state"`
}

// maxChildrenShown bounds the children that the detail of a map node lists.
const maxChildrenShown = 100

// Inspect reads everything about execution id: its values, what its nodes wait for (from the
// recorded graph version), every attempt, its notifications with their deliveries, its history
// and its requests. Every read is an index lookup on the execution id.
func (s *Store) Inspect(ctx context.Context, id string) (*ExecutionDetail, error) {
	if err := CheckText("execution id", id); err != nil {
		return nil, err
	}
	d := &ExecutionDetail{}
	var rows []ExecutionRow
	lane := LaneOf(id)
	err := s.db.NewRaw(s.q(`SELECT `+rowColumns+`, `+stateExpr+` AS state FROM (SELECT `+s.executionRead("e", "")+`
		FROM {s}.executions e WHERE e.lane = ? AND e.id = ?) e`), lane, id).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("loading execution %s: %w", id, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	tidy(rows)
	d.Execution = rows[0]
	if d.Graph, err = s.LoadGraphVersion(ctx, d.Execution.Graph, d.Execution.Version); err != nil {
		d.Graph = nil // older replicas did not record it: show the rest
	}
	reads := []struct {
		what  string
		query string
		dst   any
	}{
		{"values", `SELECT node, value, metadata, value_rev AS revision, set_at FROM {s}.nodes
			WHERE lane = ? AND execution_id = ? AND value_rev IS NOT NULL ORDER BY node`, &d.Values},
		{"attempts", `SELECT id, node, state, attempt, max_attempts, replica_id, run_at, claimed_at, finished_at, error, created_at
			FROM (SELECT attempt_id AS id, node, state, attempt, max_attempts, replica_id, run_at, claimed_at, finished_at, error,
					created_at FROM {s}.attempts WHERE lane = ?0 AND execution_id = ?1
				UNION ALL SELECT attempt_id, node, state, attempt, max_attempts, replica_id, run_at, claimed_at, finished_at, error,
					created_at FROM {s}.nodes WHERE lane = ?0 AND execution_id = ?1 AND attempt_id IS NOT NULL) a
			ORDER BY id`, &d.Attempts},
		{"history", historyQuery, &d.History},
		{"requests", `SELECT ` + cols("", requestColumns) + ` FROM {s}.requests WHERE lane = ? AND execution_id = ? ORDER BY id`, &d.Requests},
	}
	for _, r := range reads {
		if err := s.db.NewRaw(s.q(r.query), lane, id).Scan(ctx, r.dst); err != nil && !isNoRows(err) {
			return nil, fmt.Errorf("reading the %s of %s: %w", r.what, id, err)
		}
	}
	if d.Notifications, err = s.Notifications(ctx, id); err != nil {
		return nil, err
	}
	if err := s.inspectFamily(ctx, d, lane, id); err != nil {
		return nil, err
	}
	d.Waiting = waitingFor(d.Graph, d.Values, d.Attempts, id)
	d.Values, d.Attempts, d.History = orEmpty(d.Values), orEmpty(d.Attempts), orEmpty(d.History)
	d.Requests, d.Notifications = orEmpty(d.Requests), orEmpty(d.Notifications)
	return d, nil
}

// inspectFamily reads the parent of execution id, and its map nodes' progress and children.
func (s *Store) inspectFamily(ctx context.Context, d *ExecutionDetail, lane int16, id string) error {
	var parents []struct {
		Parent *Parent `bun:"parent,type:jsonb"`
	}
	if err := s.db.NewRaw(s.q(`SELECT parent FROM {s}.executions WHERE lane = ? AND id = ?`), lane, id).Scan(ctx, &parents); err != nil && !isNoRows(err) {
		return fmt.Errorf("reading the parent of %s: %w", id, err)
	}
	if len(parents) > 0 {
		d.Parent = parents[0].Parent
	}
	var err error
	if d.Maps, err = s.Maps(ctx, id); err != nil {
		return err
	}
	for i := range d.Maps {
		m := &d.Maps[i]
		err := s.db.NewRaw(s.q(`SELECT e.id, (e.parent->>'index')::int AS index, `+stateExpr+` AS state FROM {s}.executions e
			WHERE e.parent->>'id' = ?0 AND e.parent IS NOT NULL AND e.parent->>'node' = ?1 AND (e.parent->>'gen')::bigint = ?2
			ORDER BY index LIMIT ?3`), id, m.Node, m.Gen, maxChildrenShown).Scan(ctx, &m.Children)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("reading the children of %s: %w", id, err)
		}
		m.Children = orEmpty(m.Children)
	}
	d.Maps = orEmpty(d.Maps)
	return nil
}

// Maps reads the progress of the map nodes of execution id that started children, by node.
func (s *Store) Maps(ctx context.Context, id string) ([]MapView, error) {
	var out []MapView
	err := s.db.NewRaw(s.q(`SELECT node, gen, total, done FROM {s}.map_progress WHERE lane = ? AND execution_id = ? ORDER BY node`),
		LaneOf(id), id).Scan(ctx, &out)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("reading the map nodes of %s: %w", id, err)
	}
	return orEmpty(out), nil
}

// waitingFor says what each node of g without a value waits for, as Runtime.Summarize does, from
// what the database holds: a gate's condition is not evaluated, but the nodes it names that are
// not set are listed.
func waitingFor(g *GraphVersion, values []Value, attempts []Attempt, id string) []Waiting {
	out := []Waiting{}
	if g == nil {
		return out
	}
	set := map[string]bool{}
	for _, v := range values {
		set[v.Node] = true
	}
	latest := map[string]Attempt{}
	for _, a := range attempts {
		latest[a.Node] = a
	}
	for _, n := range g.Nodes {
		if n.Kind == "input" || set[n.Name] {
			continue
		}
		w := Waiting{Node: n.Name, Kind: n.Kind, Gate: n.Gate}
		var unset []string
		for _, up := range n.Upstream {
			if !set[up] {
				unset = append(unset, fmt.Sprintf("%q", up))
			}
		}
		a, ran := latest[n.Name]
		switch {
		case ran && (a.State == StateFailed || a.State == StateAbandoned):
			w.Reason = fmt.Sprintf("%s: %s; `journey retry %s %s` gives it a fresh budget",
				Failure(a.State, a.Attempt, a.MaxAttempts, deref(a.Error)), deref(a.Error), id, n.Name)
		case ran && (a.State == StatePending || a.State == StateAvailable || a.State == StateRunning):
			w.Reason = fmt.Sprintf("gate holds; attempt %d is %s", a.Attempt, a.State)
		case len(unset) > 0:
			w.Reason = fmt.Sprintf("gate %s: %s not set", n.Gate, strings.Join(unset, ", "))
		default:
			w.Reason = fmt.Sprintf("gate %s does not hold with the values set", n.Gate)
		}
		out = append(out, w)
	}
	return out
}

// orEmpty returns s, or an empty slice if s is nil, so that JSON shows [] rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// ReplicaStatus is a replica with the age of its heartbeat and the computations it runs.
type ReplicaStatus struct {
	Replica
	// Holder is the process that holds the replica's id, its host and pid; nil for a replica of a
	// release before they were recorded.
	Holder *string `bun:"holder" json:"holder,omitempty"`
	// HeartbeatAge is how long ago it last heartbeat, in milliseconds.
	HeartbeatAgeMS int64 `bun:"heartbeat_age_ms" json:"heartbeat_age_ms"`
	// Running counts the computations it runs.
	Running int64 `bun:"running" json:"running"`
}

// ReplicaStatuses lists the replicas, newest heartbeat first, with what each runs (an index
// lookup on computations_running_replica_idx per replica). The counts are a statement of their
// own: on Citus, the node rows are distributed, and a statement cannot join them with the
// replicas' table, which is the coordinator's.
func (s *Store) ReplicaStatuses(ctx context.Context) ([]ReplicaStatus, error) {
	var out []ReplicaStatus
	err := s.db.NewRaw(s.q(`SELECT `+cols("r", replicaColumns)+`,
			r.last_heartbeat < coalesce(?::timestamptz, now()) - r.stale_after_ms * interval '1 millisecond' AS stale,
			(extract(epoch FROM coalesce(?::timestamptz, now()) - r.last_heartbeat) * 1000)::bigint AS heartbeat_age_ms,
			(SELECT h.holder FROM {s}.replica_holders h WHERE h.replica_id = r.replica_id) AS holder
		FROM {s}.replica_heartbeats r ORDER BY r.last_heartbeat DESC, r.replica_id`),
		s.clock.NowOrNil(), s.clock.NowOrNil()).Scan(ctx, &out)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("listing replicas: %w", err)
	}
	if len(out) == 0 {
		return orEmpty(out), nil
	}
	ids := make([]string, len(out))
	for i, r := range out {
		ids[i] = r.ID
	}
	var running []struct {
		ID string `bun:"replica_id"`
		N  int64  `bun:"n"`
	}
	err = s.db.NewRaw(s.q(`SELECT c.replica_id, count(*) AS n FROM {s}.nodes c
		WHERE c.state = 'RUNNING' AND c.replica_id = ANY(?::text[]) GROUP BY c.replica_id`), pgdialect.Array(ids)).Scan(ctx, &running)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("counting what the replicas run: %w", err)
	}
	for _, r := range running {
		out[slices.Index(ids, r.ID)].Running = r.N
	}
	return out, nil
}

// ServedBy lists the live replicas that serve graph key (name@version).
func (s *Store) ServedBy(ctx context.Context, key string) ([]string, error) {
	if err := CheckText("graph key", key); err != nil {
		return nil, err
	}
	var ids []string
	err := s.db.NewRaw(s.q(`SELECT r.replica_id FROM {s}.replica_heartbeats r
		WHERE ? = ANY(r.graphs) AND `+liveReplica+` ORDER BY r.replica_id`), key, s.clock.NowOrNil()).Scan(ctx, &ids)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("finding the replicas that serve %s: %w", key, err)
	}
	return ids, nil
}

// CheckSchema reports, with what to do about it, a schema that does not hold journey's tables
// up to the newest ones the inspection reads; then it reads the schema's layout (ReadLayout).
func (s *Store) CheckSchema(ctx context.Context) error {
	var ok bool
	if err := s.db.NewRaw("SELECT to_regclass(?) IS NOT NULL", s.quoted+".requests").Scan(ctx, &ok); err != nil {
		return fmt.Errorf("looking for schema %s: %w", s.schema, err)
	}
	if !ok {
		return fmt.Errorf("schema %q holds no journey tables, or older ones: check -schema, or run `journey migrate -schema %s`",
			s.schema, s.schema)
	}
	return s.ReadLayout(ctx)
}
