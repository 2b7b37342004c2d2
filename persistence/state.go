package persistence

import (
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/journey-go/journey/graph"
)

// This file, rules.go and kinds.go hold the rules of a write, with no SQL: a write loads its
// executions' rows under their locks (load.go), applies its events to each execution's state in
// memory (setValues, recordOne, abandon, archive, retry: the graph's rules, which advance), and
// the state it leaves is the plan, which apply.go writes in a few set-based statements with the
// COMMIT. The rules are tested without a database (rules_test.go).

// execState is an execution loaded for writing: the caller holds the lock on its executions row
// until the transaction ends. What its write changes is kept here, for apply.
type execState struct {
	exec   Execution
	g      *graph.Graph
	key    string // GraphKey of exec's graph, once graphKey has made it
	now    time.Time
	values graph.Values
	latest map[string]*Computation // the current attempt of each node
	// marks are the nodes' rows, as loaded and as the write changes them (see nodeMark); hseq is
	// the last place taken in the execution's history: a row keeps its node's place, so that the
	// greatest of the rows' is the last.
	marks map[string]nodeMark
	hseq  int64
	// made holds the nodes whose current attempt an advance of this write made.
	made map[string]bool
	// history are the values replaced or cleared (a clearing is an entry without a value), and
	// superseded the attempts that a later attempt of their node replaced: apply moves them to
	// value_history and attempts.
	history    []historyRow
	superseded []*Computation
	// events are the lifecycle events that the write claims.
	events []eventClaim
	// cold: the executions row changes (archived_at, failure_phase, the revision of a change that
	// no node row carries).
	cold bool
	// created are the attempts the write made, in the order made; claimed are those of them that
	// this replica claimed as it made them (see Local).
	created []*Computation
	claimed []*Computation

	revision int64             // the execution's revision, advanced by each change
	saved    []graph.SaveEvent // OnSave events to fire after commit
	work     bool              // a computation became AVAILABLE: NOTIFY the dispatchers
	changed  bool              // a value or a node's outcome changed: NOTIFY the waiters
	promote  bool              // a gated attempt was created or freed a slot: promote now
	// held: the execution's graph version is paused (PauseGraph), as this replica last heard:
	// the attempts it makes wait PAUSED, as in a paused execution.
	held bool
	// caller: the write is a caller's Set or Start, which a concurrency key that cannot be stored
	// fails (ErrInvalidValue), changing nothing; elsewhere such a key fails its node.
	caller bool
	// claims: the write claims for this replica the attempts it makes ready, as far as its
	// dispatcher has free workers (Store.claimLocally): a caller's Set or Start, or a completion.
	claims bool
	// promoteLater: the promotion lock was busy, so promotion runs after the commit instead.
	promoteLater bool
	// promoteByCaller: the caller promotes once after many writes (a sweep pass after its
	// abandonments), so a busy promotion lock is not waited for after this write's commit.
	promoteByCaller bool
	// requeueAt, when set, is the run_at of an abandoned attempt whose retry is being created: a
	// retry without backoff is due since then, and keeps that attempt's place in the queue.
	requeueAt *time.Time
	// warnings are what the rules want logged: user code that panicked, say.
	warnings []warning
	// traceparent is the W3C traceparent of the span of the write, or of the outcome being
	// recorded: the attempts made link to it. Nil if not traced.
	traceparent *string
}

// nodeMark is what a write knows of a node's row: the row as loaded (nil if there was none), the
// place in the execution's history of the node's current value or of its clearing, and, once the
// write changes the row, the revision of its last change.
type nodeMark struct {
	row     *nodeRow
	hseq    int64
	rev     int64
	changed bool
}

// warning is a line for the store's log, which the rules leave for the write to log.
type warning struct {
	msg  string
	args []any
}

// historyRow is an entry of value_history: a value replaced, or the clearing of a value (Value
// nil), at its place Hseq in the execution's history.
type historyRow struct {
	Node      string
	Value     json.RawMessage
	Metadata  json.RawMessage
	Revision  int64
	ChangedAt time.Time
	Hseq      int64
}

// newState returns the state of execution e of graph g, at time now, from its node rows.
func newState(e Execution, g *graph.Graph, now time.Time, rows []*nodeRow) *execState {
	st := &execState{exec: e, g: g, now: now, revision: e.Revision, values: graph.Values{},
		latest: map[string]*Computation{}, marks: make(map[string]nodeMark, len(rows))}
	for _, r := range rows {
		st.marks[r.Node] = nodeMark{row: r, hseq: r.Hseq}
		st.revision = max(st.revision, r.Rev)
		st.hseq = max(st.hseq, r.Hseq)
		if r.ValueRev.Valid {
			st.values[r.Node] = r.value()
		}
		if c := r.attempt(); c != nil {
			st.latest[r.Node] = c
		}
	}
	st.exec.Revision = st.revision
	return st
}

// graphKey is the GraphKey of the execution's graph, made once.
func (st *execState) graphKey() string {
	if st.key == "" {
		st.key = internedKey(st.exec.GraphName, st.exec.GraphVersion)
	}
	return st.key
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

// keepsAttempt reports whether node's row, loaded, keeps its attempt through the write: the same
// attempt (or none), not claimed by it, with the same claim, deadlines, heartbeats and settings,
// in the same graph. Such a row changes only in what nodeOutcomeQuery writes.
func (st *execState) keepsAttempt(node string) bool {
	r, c := st.marks[node].row, st.latest[node]
	switch {
	case r == nil || r.GraphKey != st.graphKey():
		return false
	case c == nil:
		return !r.AttemptID.Valid
	case !r.AttemptID.Valid || r.AttemptID.Int64 != c.ID || slices.Contains(st.claimed, c):
		return false
	}
	return int32(c.Attempt) == r.Attempt.Int32 && int32(c.MaxAttempts) == r.MaxAttempts.Int32 &&
		sameText(c.ReplicaID, r.ReplicaID) && sameText(c.ClaimToken, r.ClaimToken) && sameText(c.ConcurrencyKey, r.ConcurrencyKey) && sameText(c.RateKey, r.RateKey) &&
		sameText(c.Traceparent, r.Traceparent) && sameTime(&c.RunAt, timeOf(&r.RunAt)) && sameTime(c.ClaimedAt, timeOf(&r.ClaimedAt)) &&
		sameTime(c.Deadline, timeOf(&r.Deadline)) && sameTime(c.HeartbeatDeadline, timeOf(&r.HeartbeatDeadline)) &&
		sameTime(c.LastHeartbeatAt, timeOf(&r.LastHeartbeatAt)) && sameTime(&c.CreatedAt, timeOf(&r.CreatedAt)) &&
		sameTime(c.AvailableAt, timeOf(&r.AvailableAt)) && c.AbandonAfterMS == r.AbandonAfterMS.Int64 &&
		c.HeartbeatTimeoutMS == r.HeartbeatTimeoutMS.Int64 && r.AbandonAfterMS.Valid && r.HeartbeatTimeoutMS.Valid &&
		(c.MaxParallel == nil) == !r.MaxParallel.Valid && (c.MaxParallel == nil || int32(*c.MaxParallel) == r.MaxParallel.Int32)
}

// sameText reports whether s and t hold the same text, or are both NULL.
func sameText(s *string, t pgtype.Text) bool {
	return (s == nil) == !t.Valid && (s == nil || *s == t.String)
}

// touch records that node's row changes at the execution's current revision.
func (st *execState) touch(node string) {
	m := st.marks[node]
	m.rev, m.changed = st.revision, true
	st.marks[node] = m
}

// changedNodes are the nodes whose row the write changes, in order.
func (st *execState) changedNodes() []string {
	var nodes []string
	for node, m := range st.marks {
		if m.changed {
			nodes = append(nodes, node)
		}
	}
	slices.Sort(nodes)
	return nodes
}

// place gives node's value, or its clearing, the next place in the execution's history, and
// returns the place it had.
func (st *execState) place(node string) int64 {
	m := st.marks[node]
	had := m.hseq
	st.hseq++
	m.hseq = st.hseq
	st.marks[node] = m
	return had
}

// setValue makes raw, with meta, the value of node, at revision rev, unless it equals the value
// it has (jsonEqual, metadata included). The value it replaces moves to the history. It reports
// whether the value changed.
func (st *execState) setValue(node string, raw, meta json.RawMessage, rev int64) bool {
	old, had := st.values[node]
	if had && jsonEqual(old.Raw, raw) && jsonEqual(old.Metadata, meta) {
		return false
	}
	if hseq := st.place(node); had {
		st.history = append(st.history, historyRow{Node: node, Value: old.Raw, Metadata: old.Metadata,
			Revision: old.Revision, ChangedAt: old.SetAt, Hseq: hseq})
	}
	v := graph.Value{Raw: raw, Revision: rev, SetAt: st.now, Metadata: meta}
	st.values[node] = v
	st.touch(node)
	st.changed = true
	st.recordSave(node, v)
	return true
}

// clearValue clears node's value, at the execution's current revision: the value moves to the
// history, and the clearing is recorded there after it.
func (st *execState) clearValue(node string) {
	old, had := st.values[node]
	if !had {
		return
	}
	st.history = append(st.history, historyRow{Node: node, Value: old.Raw, Metadata: old.Metadata,
		Revision: old.Revision, ChangedAt: old.SetAt, Hseq: st.place(node)})
	st.history = append(st.history, historyRow{Node: node, Revision: st.revision, ChangedAt: st.now, Hseq: st.hseq})
	delete(st.values, node)
	st.touch(node)
	st.changed = true
}

// newAttempt makes c, new, the current attempt of its node: the attempt it replaces moves to the
// attempts history.
func (st *execState) newAttempt(c *Computation) {
	if prev := st.latest[c.Node]; prev != nil {
		st.superseded = append(st.superseded, prev)
	}
	c.ID = newAttemptID()
	c.Lane = st.exec.Lane
	st.latest[c.Node] = c
	st.created = append(st.created, c)
	st.touch(c.Node)
}

// attemptChanged records that the current attempt c of its node changed (its state, its error).
func (st *execState) attemptChanged(c *Computation) {
	if st.latest[c.Node] == c {
		st.touch(c.Node)
	}
}

// recordSave queues the OnSave event of a value written, if its node or the graph has a callback.
func (st *execState) recordSave(node string, v graph.Value) {
	if n, ok := st.g.Node(node); ok && (n.Settings().OnSave != nil || st.g.OnSave() != nil) {
		st.saved = append(st.saved, graph.SaveEvent{ExecutionID: st.exec.ID, Graph: st.g.Name(), Node: node, Value: v})
	}
}

// warn leaves a warning for the write to log.
func (st *execState) warn(msg string, args ...any) {
	st.warnings = append(st.warnings, warning{msg: msg, args: append([]any{"execution_id", st.exec.ID}, args...)})
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
