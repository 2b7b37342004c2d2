package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/journey-go/journey/persistence/machine"
)

// SetArchived archives or unarchives an execution. Archived executions are left out of listings
// and loads; their waiting attempts are canceled, and revived by Unarchive, which fails with
// ErrKeyHeld if another unarchived execution of the graph holds the execution's key by then.
func (s *Store) SetArchived(ctx context.Context, id string, archived bool) error {
	err := s.event(ctx, id, nil, machine.Archive{Unarchive: !archived})
	if err != nil && !archived {
		if e, lerr := s.LoadExecution(ctx, id); lerr == nil {
			if held := keyHeld(err, e); held != nil {
				return held
			}
		}
	}
	return err
}

// Cancel cancels an execution for reason (machine.Cancel), and announces it to the replicas that
// run its attempts (PayloadCancel); its children follow once it has committed. Canceling a
// canceled execution changes nothing.
func (s *Store) Cancel(ctx context.Context, id, reason string) error {
	if err := CheckText("reason", reason); err != nil {
		return err
	}
	return s.event(ctx, id, nil, machine.Cancel{Reason: reason})
}

// SetPaused pauses or resumes an execution (machine.Pause); its children follow once it has
// committed. Pausing a paused execution, or resuming one that is not, changes nothing; a canceled
// one stays as it is.
func (s *Store) SetPaused(ctx context.Context, id string, paused bool) error {
	return s.event(ctx, id, nil, machine.Pause{Resume: !paused})
}

// Retry gives a node that failed for good a fresh budget: a new first attempt.
func (s *Store) Retry(ctx context.Context, id, node string) error {
	if err := CheckText("node", node); err != nil {
		return err
	}
	return s.event(ctx, id, nil, machine.Retry{Node: node})
}

// wakeRetry is how long an execution whose due-tick advance failed waits before the next try, so
// that it cannot keep the head of the queue.
const wakeRetry = time.Minute

// WakeDue advances up to limit executions of the served graphs whose next tick has come due, each
// in its own transaction, and returns how many it advanced. Executions being written are skipped:
// their writer advances them. One execution's failure is logged, and that execution is tried again
// after wakeRetry; it stops neither the pass nor the others. The database out of reach (see
// Unreachable) ends the pass with the error, and postpones nothing: the next pass tries again.
func (s *Store) WakeDue(ctx context.Context, limit int) (int, error) {
	if len(s.keys) == 0 {
		return 0, nil
	}
	lanes, err := s.lanesWith(ctx, s.db, `SELECT lane FROM {s}.executions WHERE wake_at <= coalesce(?::timestamptz, now())
		AND archived_at IS NULL`, s.clock.NowOrNil())
	if err != nil {
		return 0, err
	}
	var ids []string
	for _, lane := range lanes {
		if len(ids) >= limit {
			break
		}
		var found []string
		err := s.db.NewRaw(s.q(`SELECT id FROM {s}.executions
		WHERE wake_at <= coalesce(?::timestamptz, now()) AND archived_at IS NULL
			AND graph_name || '@' || graph_version IN (?)`+lanePin("", lane)+`
		ORDER BY wake_at LIMIT ?
		FOR UPDATE SKIP LOCKED`), s.clock.NowOrNil(), bun.List(s.keys), limit-len(ids)).Scan(ctx, &found)
		if err != nil && !isNoRows(err) {
			return 0, fmt.Errorf("finding executions with due ticks: %w", err)
		}
		ids = append(ids, found...)
	}
	woken := 0
	for _, id := range ids {
		err := s.event(ctx, id, s.boundLocks, machine.Advance{}) // a no-op if another replica got there first
		if err == nil {
			woken++
			continue
		}
		if ctx.Err() != nil {
			return woken, ctx.Err()
		}
		if Unreachable(err) { // not this execution's fault: the next pass tries it again
			return woken, fmt.Errorf("advancing execution %s, whose tick is due: %w", id, err)
		}
		s.logger.Error("advancing an execution with a due tick failed; trying it again later", "service", "sweeper",
			"execution_id", id, "retry_in", wakeRetry, "error", err)
		_, err = s.db.NewRaw(s.q(`UPDATE {s}.executions SET wake_at = coalesce(?::timestamptz, now()) + ? * interval '1 millisecond'
			WHERE lane = ? AND id = ?`), s.clock.NowOrNil(), wakeRetry.Milliseconds(), LaneOf(id), id).Exec(ctx)
		if err != nil {
			s.logger.Warn("postponing a due tick failed", "service", "sweeper", "execution_id", id, "error", err)
		}
	}
	return woken, nil
}

// Change is one change of a value, for History.
type Change struct {
	Node     string          `bun:"node" json:"node"`
	Value    json.RawMessage `bun:"value" json:"value"` // nil when the value was cleared
	Metadata json.RawMessage `bun:"metadata" json:"metadata,omitempty"`
	Revision int64           `bun:"revision" json:"revision"`
	At       time.Time       `bun:"changed_at" json:"at"`
}

// historyQuery lists the changes of the values of an execution (lane ?0, id ?1), oldest first:
// the values replaced or cleared, and the clearings, in value_history, and the current values in
// their node rows, each at its place in the history (hseq). Each table is pinned to the lane, as
// Citus reads one shard alone only then.
const historyQuery = `SELECT node, value, metadata, revision, changed_at FROM (
		SELECT h.hseq, h.node, h.value, h.metadata, h.revision, h.changed_at FROM {s}.value_history h
		WHERE h.lane = ?0::smallint AND h.execution_id = ?1::text
		UNION ALL
		SELECT n.hseq, n.node, n.value, n.metadata, n.value_rev, n.set_at FROM {s}.nodes n
		WHERE n.lane = ?0::smallint AND n.execution_id = ?1::text AND n.value_rev IS NOT NULL
	) changes ORDER BY hseq`

// History lists every change of every value of an execution, oldest first.
func (s *Store) History(ctx context.Context, id string) ([]Change, error) {
	if _, err := s.LoadExecution(ctx, id); err != nil {
		return nil, err
	}
	var out []Change
	err := s.db.NewRaw(s.q(historyQuery), LaneOf(id), id).Scan(ctx, &out)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("reading the history of %s: %w", id, err)
	}
	return out, nil
}

// Filter operators of ListQuery.
const (
	OpEq     = "eq"
	OpNeq    = "neq"
	OpLt     = "lt"
	OpLte    = "lte"
	OpGt     = "gt"
	OpGte    = "gte"
	OpIn     = "in"
	OpSet    = "set"
	OpNotSet = "not_set"
)

var comparisons = map[string]string{OpEq: "=", OpNeq: "<>", OpLt: "<", OpLte: "<=", OpGt: ">", OpGte: ">="}

// Filter keeps the executions whose node's value compares with Value (JSON-encoded) by Op.
type Filter struct {
	Node  string
	Op    string
	Value json.RawMessage   // for the comparisons
	In    []json.RawMessage // for OpIn
}

// ListQuery selects executions. Filters and sorting run in SQL, on the jsonb values.
type ListQuery struct {
	Graph, Version  string
	Key             string // the executions started with this key; with IncludeArchived, the archived ones too
	Filters         []Filter
	OrderBy         string // a column (id, created_at, updated_at, revision) or a node; default created_at
	Desc            bool
	Limit, Offset   int
	IncludeArchived bool
	State           string // one of ExecStates; ExecArchived implies IncludeArchived
}

// Columns that ListQuery.OrderBy may name.
var orderColumns = map[string]bool{"id": true, "created_at": true, "updated_at": true, "revision": true}

// checkFilters returns a *TextError if the node of a filter cannot go into SQL, and an error
// wrapping ErrInvalidValue if its value cannot.
func checkFilters(filters []Filter) error {
	for _, f := range filters {
		if err := CheckText("the node of a filter", f.Node); err != nil {
			return err
		}
		for _, v := range append([]json.RawMessage{f.Value}, f.In...) {
			if err := CheckValue(v, 0); err != nil {
				return fmt.Errorf("%w: the value of the filter on node %q: %w", ErrInvalidValue, f.Node, err)
			}
		}
	}
	return nil
}

// where builds the FROM and WHERE clauses of a listing.
func (s *Store) where(q ListQuery) (string, []any, error) {
	if err := checkTexts("ListQuery.Graph", q.Graph, "ListQuery.Version", q.Version, "ListQuery.Key", q.Key,
		"ListQuery.OrderBy", q.OrderBy); err != nil {
		return "", nil, err
	}
	if err := checkFilters(q.Filters); err != nil {
		return "", nil, err
	}
	var b strings.Builder
	var args []any
	b.WriteString(s.q(" FROM {s}.executions e"))
	if q.OrderBy != "" && !orderColumns[q.OrderBy] {
		b.WriteString(s.q(` LEFT JOIN {s}.nodes sv ON sv.lane = e.lane AND sv.execution_id = e.id AND sv.node = ?`))
		args = append(args, q.OrderBy)
	}
	b.WriteString(" WHERE TRUE")
	if q.Graph != "" {
		b.WriteString(" AND e.graph_name = ?")
		args = append(args, q.Graph)
	}
	if q.Version != "" {
		b.WriteString(" AND e.graph_version = ?")
		args = append(args, q.Version)
	}
	if q.State != "" && !slices.Contains(ExecStates, q.State) {
		return "", nil, fmt.Errorf("%w: unknown state %q: use one of %s", ErrBadRequest, q.State, strings.Join(ExecStates, ", "))
	}
	if q.State == ExecArchived {
		q.IncludeArchived = true
	}
	if !q.IncludeArchived {
		b.WriteString(" AND e.archived_at IS NULL")
	}
	state, stateArgs := s.stateClause(q.State)
	b.WriteString(s.q(state))
	args = append(args, stateArgs...)
	switch {
	case q.Key != "" && q.IncludeArchived:
		// Spelled out, the OR lets the planner read executions_key_idx for the unarchived and
		// executions_archived_key_idx for the archived, each a partial index.
		b.WriteString(" AND e.key = ? AND (e.archived_at IS NULL OR e.archived_at IS NOT NULL)")
		args = append(args, q.Key)
	case q.Key != "":
		b.WriteString(" AND e.key = ?")
		args = append(args, q.Key)
	}
	for _, f := range q.Filters {
		value := s.q(`SELECT v.value FROM {s}.nodes v WHERE v.lane = e.lane AND v.execution_id = e.id AND v.node = ?
			AND v.value_rev IS NOT NULL`)
		switch op, isCmp := comparisons[f.Op]; {
		case isCmp:
			b.WriteString(" AND (" + value + ") " + op + " ?::jsonb")
			args = append(args, f.Node, string(f.Value))
		case f.Op == OpIn:
			args = append(args, f.Node)
			list := make([]string, len(f.In))
			for i, v := range f.In {
				list[i] = "?::jsonb"
				args = append(args, string(v))
			}
			if len(list) == 0 {
				list = []string{"NULL"}
			}
			b.WriteString(" AND (" + value + ") IN (" + strings.Join(list, ", ") + ")")
		case f.Op == OpSet:
			b.WriteString(" AND EXISTS (" + value + ")")
			args = append(args, f.Node)
		case f.Op == OpNotSet:
			b.WriteString(" AND NOT EXISTS (" + value + ")")
			args = append(args, f.Node)
		default:
			return "", nil, fmt.Errorf("journey: unknown filter operator %q on node %q: use eq, neq, lt, lte, gt, gte, in, set or not_set", f.Op, f.Node)
		}
	}
	return b.String(), args, nil
}

// ListExecutions returns the executions that match q.
func (s *Store) ListExecutions(ctx context.Context, q ListQuery) ([]Execution, error) {
	from, args, err := s.where(q)
	if err != nil {
		return nil, err
	}
	dir := "ASC"
	if q.Desc {
		dir = "DESC"
	}
	order := "e.created_at " + dir
	switch {
	case q.OrderBy == "revision" || q.OrderBy == "updated_at":
		// Derived from the node rows, which the hot path writes alone (see executionRead).
		order = s.q(`greatest(e.` + q.OrderBy + `, (SELECT max(n.` + map[string]string{"revision": "rev", "updated_at": "changed_at"}[q.OrderBy] +
			`) FROM {s}.nodes n WHERE n.lane = e.lane AND n.execution_id = e.id)) ` + dir)
	case orderColumns[q.OrderBy]:
		order = "e." + q.OrderBy + " " + dir
	case q.OrderBy != "":
		order = "sv.value " + dir + " NULLS LAST"
	}
	orderBy, limits := "ORDER BY "+order+", e.id "+dir, ""
	if q.Limit > 0 {
		limits += " LIMIT ?"
		args = append(args, q.Limit)
	}
	if q.Offset > 0 {
		limits += " OFFSET ?"
		args = append(args, q.Offset)
	}
	// The page is chosen first, and each of its executions' revision is then derived once. Citus
	// cannot join a page, which it gathers on the coordinator, with the node rows: there, each
	// execution's revision is derived on its shard, as the rows are read.
	query := "SELECT " + s.executionRead("e", "") + " FROM (SELECT " + cols("e", executionColumns) +
		", row_number() OVER (" + orderBy + ") AS rn" + from + " " + orderBy + limits + ") e ORDER BY e.rn"
	if s.citus {
		query = "SELECT " + s.executionRead("e", "") + from + " " + orderBy + limits
	}

	var out []Execution
	if err := s.db.NewRaw(query, args...).Scan(ctx, &out); err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("listing executions: %w", err)
	}
	return out, nil
}

// CountExecutions counts the executions that match q, ignoring its order, limit and offset.
func (s *Store) CountExecutions(ctx context.Context, q ListQuery) (int64, error) {
	q.OrderBy = ""
	from, args, err := s.where(q)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := s.db.NewRaw("SELECT count(*)"+from, args...).Scan(ctx, &n); err != nil {
		return 0, fmt.Errorf("counting executions: %w", err)
	}
	return n, nil
}
