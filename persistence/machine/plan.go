package machine

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/journey-go/journey/graph"
)

// Plan is what a Step decided for one execution: the state the execution is left in, and the
// writes that take it there, which the applier (persistence) makes in a few set-based statements
// with the COMMIT. Its accessors are what the applier reads; the rules (rules.go) fill it. A
// plan is the working state of further events of the same write (Plan.Step): the outcomes of a
// batch, one after another, or the claim of what it made ready.
type Plan struct {
	x      *Loaded
	exec   Execution
	g      *graph.Graph
	now    time.Time
	env    Env
	values graph.Values
	latest map[string]*Attempt // the current attempt of each node
	// marks are the nodes' rows, as loaded and as the write changes them (see nodeMark); hseq is
	// the last place taken in the execution's history: a row keeps its node's place, so that the
	// greatest of the rows' is the last.
	marks map[string]nodeMark
	hseq  int64
	// made holds the nodes whose current attempt an advance of this write made.
	made map[string]bool
	// history are the values replaced or cleared (a clearing is an entry without a value), and
	// superseded the attempts that a later attempt of their node replaced.
	history    []HistoryRow
	superseded []*Attempt
	// events are the lifecycle events that the write claims.
	events []EventClaim
	// cold: the executions row changes (archived_at, failure_phase, canceled_at, paused_at,
	// ended_at, the revision of a change that no node row carries).
	cold bool
	// created are the attempts the write made, in the order made; claimed are those of them that
	// it claimed for a replica as it made them (ClaimLocally).
	created []*Attempt
	claimed []*Attempt

	revision int64             // the execution's revision, advanced by each change
	saved    []graph.SaveEvent // OnSave events to fire after commit
	work     bool              // a computation became AVAILABLE: NOTIFY the dispatchers
	changed  bool              // a value or a node's outcome changed: NOTIFY the waiters
	promote  bool              // a gated attempt was created or freed a slot: promote now
	// promoteByCaller: the caller promotes once after many writes (a sweep pass after its
	// abandonments), so a busy promotion lock is not waited for after this write's commit.
	promoteByCaller bool
	// caller: the event is a caller's Set or Start, which a concurrency key that cannot be stored
	// fails (ErrInvalidValue), changing nothing; elsewhere such a key fails its node.
	caller bool
	// requeueAt, when set, is the run_at of an abandoned attempt whose retry is being created: a
	// retry without backoff is due since then, and keeps that attempt's place in the queue.
	requeueAt *time.Time
	// cascade is what the write's change asks of the execution's children.
	cascade Cascade
	// canceled: the write canceled the execution; the replicas that run its attempts are told.
	canceled bool
	// deferred: a Set left the advance for after its commit (Set.Defer).
	deferred bool
	// touches counts the changes of node rows (touch), for a change that must know whether it
	// made any.
	touches int
	// warnings are what the rules want logged: user code that panicked, say.
	warnings []Warning
}

// nodeMark is what a write knows of a node's row: the row as loaded (nil if there was none), the
// place in the execution's history of the node's current value or of its clearing, and, once the
// write changes the row, the revision of its last change.
type nodeMark struct {
	row     *Row
	hseq    int64
	rev     int64
	changed bool
}

// Warning is a line for the store's log, which the rules leave for the write to log.
type Warning struct {
	Msg  string
	Args []any
}

// HistoryRow is an entry of the values' history: a value replaced, or the clearing of a value
// (Value nil), at its place Hseq in the execution's history.
type HistoryRow struct {
	Node      string
	Value     json.RawMessage
	Metadata  json.RawMessage
	Revision  int64
	ChangedAt time.Time
	Hseq      int64
}

// EventClaim is a lifecycle event that a write claims: the failure of a phase, the completion or
// the cancellation; a failure keeps the nodes that had failed, as JSON.
type EventClaim struct {
	Event       string
	Phase       int
	FailedNodes string
}

// Cascade is what a change of a parent asks of its children (graph.Map, graph.Child): they are
// canceled, paused, resumed or archived with it. Unarchiving a parent leaves its children as they
// are: archived, they have ended for its map nodes, which collect them once unarchived.
type Cascade struct {
	Cancel  bool
	Reason  string // the parent's cancel reason
	Pause   bool
	Resume  bool
	Archive bool
}

// Any reports whether the cascade asks anything.
func (c Cascade) Any() bool { return c.Cancel || c.Pause || c.Resume || c.Archive }

// NodeWrite is a node row that a plan writes: its image after the write.
type NodeWrite struct {
	Node string
	// Insert: the row is new. Outcome: the row keeps its attempt but for what an outcome writes
	// (its state, error, upstream revisions and end), and its value; else the whole row changes.
	Insert, Outcome bool
	Rev, Hseq       int64
	Value           *graph.Value // nil: none
	Attempt         *Attempt     // nil: none
	// Claimed: the attempt is claimed by this write (ClaimLocally): its claim's times are the
	// writing statement's.
	Claimed bool
}

// newPlan is the working state of the events of a write on x, as loaded.
func newPlan(x *Loaded, env Env) *Plan {
	p := &Plan{x: x, exec: x.Exec, g: x.Graph, now: env.Now, env: env, revision: x.Exec.Revision,
		values: make(graph.Values, len(x.Rows)), latest: make(map[string]*Attempt, len(x.Rows)),
		marks: make(map[string]nodeMark, len(x.Rows))}
	for i := range x.Rows {
		r := &x.Rows[i]
		p.marks[r.Node] = nodeMark{row: r, hseq: r.Hseq}
		p.revision = max(p.revision, r.Rev)
		p.hseq = max(p.hseq, r.Hseq)
		if r.Value != nil {
			p.values[r.Node] = *r.Value
		}
		if r.Attempt != nil {
			c := *r.Attempt // the plan's own: the loaded row stays as it was
			p.latest[r.Node] = &c
		}
	}
	p.exec.Revision = p.revision
	return p
}

// Exec is the execution as the plan leaves it.
func (p *Plan) Exec() *Execution { return &p.exec }

// Loaded is the execution as loaded, before the plan.
func (p *Plan) Loaded() *Loaded { return p.x }

// Graph is the execution's graph.
func (p *Plan) Graph() *graph.Graph { return p.g }

// GraphKey is the key of the execution's graph version.
func (p *Plan) GraphKey() string { return p.x.GraphKey }

// Now is the time of the write.
func (p *Plan) Now() time.Time { return p.now }

// Revision is the execution's revision after the plan.
func (p *Plan) Revision() int64 { return p.revision }

// Promoted records that a set-based promotion in the plan's own transaction, after its rows were
// written, made node's PENDING attempt AVAILABLE, at revision rev (machine.Promote's twin, whose
// row the statement wrote).
func (p *Plan) Promoted(node string, rev int64) {
	if c := p.latest[node]; c != nil && c.State == StatePending {
		c.State, c.AvailableAt = StateAvailable, &p.now
		p.revision = max(p.revision, rev)
		p.work = true
	}
}

// Values are the execution's values after the plan. The applier may replace a value's Raw with
// the same JSON as PostgreSQL spells it (SetStored).
func (p *Plan) Values() graph.Values { return p.values }

// SetStored replaces the JSON of node's value with raw, the same value as PostgreSQL stored it.
func (p *Plan) SetStored(node string, raw json.RawMessage) {
	if v, ok := p.values[node]; ok && raw != nil {
		v.Raw = raw
		p.values[node] = v
	}
}

// ClaimedValues are the values as the functions of the attempts the plan claimed read them: each
// node that has failed for good is marked Failed.
func (p *Plan) ClaimedValues() graph.Values { return p.withFailures(p.values) }

// Latest is the current attempt of node after the plan, nil if none.
func (p *Plan) Latest(node string) *Attempt { return p.latest[node] }

// Writes are the node rows the plan writes, in the order of their nodes.
func (p *Plan) Writes() []NodeWrite {
	var nodes []string
	for node, m := range p.marks {
		if m.changed {
			nodes = append(nodes, node)
		}
	}
	slices.Sort(nodes)
	out := make([]NodeWrite, len(nodes))
	for i, node := range nodes {
		m := p.marks[node]
		w := NodeWrite{Node: node, Insert: m.row == nil, Outcome: m.row != nil && p.keepsAttempt(node),
			Rev: m.rev, Hseq: m.hseq, Attempt: p.latest[node]}
		if v, ok := p.values[node]; ok {
			w.Value = &v
		}
		w.Claimed = w.Attempt != nil && slices.Contains(p.claimed, w.Attempt)
		out[i] = w
	}
	return out
}

// History are the values the plan replaced or cleared.
func (p *Plan) History() []HistoryRow { return p.history }

// Superseded are the attempts that later attempts of their node replaced, for the attempts'
// history.
func (p *Plan) Superseded() []*Attempt { return p.superseded }

// Events are the lifecycle events the plan claims.
func (p *Plan) Events() []EventClaim { return p.events }

// Saved are the OnSave events to fire once the plan has committed.
func (p *Plan) Saved() []graph.SaveEvent { return p.saved }

// Warnings are what the rules ask the write to log.
func (p *Plan) Warnings() []Warning { return p.warnings }

// Created are the attempts the plan made, in the order made.
func (p *Plan) Created() []*Attempt { return p.created }

// Claimed are the attempts the plan claimed (ClaimLocally).
func (p *Plan) Claimed() []*Attempt { return p.claimed }

// Work reports whether an attempt became AVAILABLE for any replica: the dispatchers are told.
func (p *Plan) Work() bool { return p.work }

// Changed reports whether a value or a node's outcome changed: the waiters are told.
func (p *Plan) Changed() bool { return p.changed }

// Promote reports whether a gated attempt was made or freed a slot: promote now.
func (p *Plan) Promote() bool { return p.promote }

// PromoteByCaller reports whether the caller promotes after many writes, so that a busy
// promotion lock need not be waited for after this one's commit.
func (p *Plan) PromoteByCaller() bool { return p.promoteByCaller }

// Canceled reports whether the plan canceled the execution: the replicas running its attempts
// are told.
func (p *Plan) Canceled() bool { return p.canceled }

// Cascade is what the plan's change asks of the execution's children.
func (p *Plan) Cascade() Cascade { return p.cascade }

// Cold reports whether the executions row changes: its cold columns, or a revision that no node
// row carries, or its wake time.
func (p *Plan) Cold() bool {
	top := p.x.Exec.Revision // the greatest revision a row carries
	for _, m := range p.marks {
		if m.changed {
			top = max(top, m.rev)
		}
	}
	return p.cold || p.revision > top || !sameTime(p.Wake(), p.x.Exec.WakeAt)
}

// Wake is when the execution must be advanced again without a write: now, for a Set that deferred
// its advance (Set.Defer), else the earliest time a tick of it comes due, nil if none waits.
func (p *Plan) Wake() *time.Time {
	if p.deferred {
		return &p.now
	}
	return p.nextWake()
}

// Deferred reports whether a Set of the plan left the advance for after the commit (Set.Defer).
func (p *Plan) Deferred() bool { return p.deferred }

// Ready counts the AVAILABLE attempts the plan made that are still their node's current one: what
// ClaimLocally may claim.
func (p *Plan) Ready() int {
	n := 0
	for _, c := range p.created {
		if c.State == StateAvailable && p.latest[c.Node] == c {
			n++
		}
	}
	return n
}

// LeftAvailable reports whether the execution has an AVAILABLE attempt after the plan: a claim
// that ran while the write held the execution's row skipped it, and waits for the write's NOTIFY,
// which must then announce work, though the write made none. A sibling's completion is such a
// write: without it, attempts beyond the free workers waited for the poll.
func (p *Plan) LeftAvailable() bool {
	for _, c := range p.latest {
		if c.State == StateAvailable {
			return true
		}
	}
	return false
}

// EndDelta is how the plan changes the count of ended children of the execution's parent's map
// node: +1 if a child execution ended, -1 if one that had ended runs again (a retry, an unarchive),
// 0 otherwise or for an execution that is no child.
func (p *Plan) EndDelta() int {
	switch {
	case p.exec.Parent == nil || (p.x.Exec.EndedAt != nil) == (p.exec.EndedAt != nil):
		return 0
	case p.exec.EndedAt != nil:
		return 1
	}
	return -1
}

// keepsAttempt reports whether node's row, loaded, keeps its attempt through the write: the same
// attempt (or none), not claimed by it, with the same claim, deadlines, heartbeats and settings,
// in the same graph. Such a row changes only in what an outcome writes.
func (p *Plan) keepsAttempt(node string) bool {
	r, c := p.marks[node].row, p.latest[node]
	switch {
	case r == nil || r.GraphKey != p.x.GraphKey:
		return false
	case c == nil:
		return r.Attempt == nil
	case r.Attempt == nil || r.Attempt.ID != c.ID || slices.Contains(p.claimed, c):
		return false
	}
	a := r.Attempt
	return c.Attempt == a.Attempt && c.MaxAttempts == a.MaxAttempts &&
		sameString(c.ReplicaID, a.ReplicaID) && sameString(c.ClaimToken, a.ClaimToken) &&
		sameString(c.ConcurrencyKey, a.ConcurrencyKey) && sameString(c.RateKey, a.RateKey) &&
		sameString(c.Traceparent, a.Traceparent) && c.RunAt.Equal(a.RunAt) && sameTime(c.ClaimedAt, a.ClaimedAt) &&
		sameTime(c.Deadline, a.Deadline) && sameTime(c.HeartbeatDeadline, a.HeartbeatDeadline) &&
		sameTime(c.LastHeartbeatAt, a.LastHeartbeatAt) && c.CreatedAt.Equal(a.CreatedAt) &&
		sameTime(c.AvailableAt, a.AvailableAt) && c.AbandonAfterMS == a.AbandonAfterMS &&
		c.HeartbeatTimeoutMS == a.HeartbeatTimeoutMS && sameInt(c.MaxParallel, a.MaxParallel)
}

func sameString(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func sameInt(a, b *int) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// touch records that node's row changes at the execution's current revision.
func (p *Plan) touch(node string) {
	m := p.marks[node]
	m.rev, m.changed = p.revision, true
	p.marks[node] = m
	p.touches++
}

// place gives node's value, or its clearing, the next place in the execution's history, and
// returns the place it had.
func (p *Plan) place(node string) int64 {
	m := p.marks[node]
	had := m.hseq
	p.hseq++
	m.hseq = p.hseq
	p.marks[node] = m
	return had
}

// setValue makes raw, with meta, the value of node, at revision rev, unless it equals the value
// it has (jsonEqual, metadata included). The value it replaces moves to the history. It reports
// whether the value changed.
func (p *Plan) setValue(node string, raw, meta json.RawMessage, rev int64) bool {
	old, had := p.values[node]
	if had && jsonEqual(old.Raw, raw) && jsonEqual(old.Metadata, meta) {
		return false
	}
	if hseq := p.place(node); had {
		p.history = append(p.history, HistoryRow{Node: node, Value: old.Raw, Metadata: old.Metadata,
			Revision: old.Revision, ChangedAt: old.SetAt, Hseq: hseq})
	}
	v := graph.Value{Raw: raw, Revision: rev, SetAt: p.now, Metadata: meta}
	p.values[node] = v
	p.touch(node)
	p.changed = true
	p.recordSave(node, v)
	return true
}

// clearValue clears node's value, at the execution's current revision: the value moves to the
// history, and the clearing is recorded there after it.
func (p *Plan) clearValue(node string) {
	old, had := p.values[node]
	if !had {
		return
	}
	p.history = append(p.history, HistoryRow{Node: node, Value: old.Raw, Metadata: old.Metadata,
		Revision: old.Revision, ChangedAt: old.SetAt, Hseq: p.place(node)})
	p.history = append(p.history, HistoryRow{Node: node, Revision: p.revision, ChangedAt: p.now, Hseq: p.hseq})
	delete(p.values, node)
	p.touch(node)
	p.changed = true
}

// newAttempt makes c, new, the current attempt of its node: the attempt it replaces moves to the
// attempts history.
func (p *Plan) newAttempt(c *Attempt) {
	if prev := p.latest[c.Node]; prev != nil {
		p.superseded = append(p.superseded, prev)
	}
	c.ID = p.env.NewID()
	c.Lane = p.exec.Lane
	c.ExecutionID = p.exec.ID
	c.GraphKey = p.x.GraphKey
	p.latest[c.Node] = c
	p.created = append(p.created, c)
	p.touch(c.Node)
}

// attemptChanged records that the current attempt c of its node changed (its state, its error).
func (p *Plan) attemptChanged(c *Attempt) {
	if p.latest[c.Node] == c {
		p.touch(c.Node)
	}
}

// recordSave queues the OnSave event of a value written, if its node or the graph has a callback.
func (p *Plan) recordSave(node string, v graph.Value) {
	if n, ok := p.g.Node(node); ok && (n.Settings().OnSave != nil || p.g.OnSave() != nil) {
		p.saved = append(p.saved, graph.SaveEvent{ExecutionID: p.exec.ID, Graph: p.g.Name(), Node: node, Value: v})
	}
}

// warn leaves a warning for the write to log.
func (p *Plan) warn(msg string, args ...any) {
	p.warnings = append(p.warnings, Warning{Msg: msg, Args: append([]any{"execution_id", p.exec.ID}, args...)})
}
