package journey

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/jackc/pgx/v5"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/telemetry"
	"github.com/journey-go/journey/persistence"
	"github.com/uptrace/bun"
)

// Execution is one run of a graph.
type Execution struct {
	ID      string
	Graph   string
	Version string
	// Revision counts the execution's changes: sets, claims, completions, failures and
	// invalidations.
	Revision   int64
	ArchivedAt *time.Time
	CreatedAt  time.Time
	UpdatedAt  time.Time
	// Key is the key the execution was started with (WithKey, WithKeys, or graph.SingletonKey
	// for a graph.Singleton), "" for none.
	Key string
	// Existing is true on an execution that Start or StartMany returned for a key that it held
	// already: that call started nothing, and did not apply its values. It is only meaningful on
	// what Start and StartMany return; elsewhere it is false.
	Existing bool
	// CanceledAt is when the execution was canceled (Cancel), with CancelReason; nil if it was not.
	CanceledAt   *time.Time `json:",omitempty"`
	CancelReason string     `json:",omitempty"`
	// PausedAt is when the execution was paused (Pause), nil while it is not.
	PausedAt *time.Time `json:",omitempty"`
	// Priority is the execution's priority (WithPriority), 0 for none.
	Priority int `json:",omitempty"`
	// Parent is, for a child execution (graph.Map, graph.Child), its parent's node that started
	// it; nil for any other.
	Parent *Parent `json:",omitempty"`
}

// Parent is the node of a parent execution that started a child execution: the parent's ID, the
// Map or Child node, and the child's place in the node's list of items.
type Parent struct {
	ID    string
	Node  string
	Index int
}

func toExecution(e *persistence.Execution) *Execution {
	return &Execution{
		ID: e.ID, Graph: e.GraphName, Version: e.GraphVersion, Revision: e.Revision,
		ArchivedAt: e.ArchivedAt, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
		Key: deref(e.Key), Existing: e.Existing, CanceledAt: e.CanceledAt, CancelReason: deref(e.CancelReason),
		PausedAt: e.PausedAt, Priority: int(e.Priority), Parent: toParent(e.Parent),
	}
}

func toParent(p *persistence.Parent) *Parent {
	if p == nil {
		return nil
	}
	return &Parent{ID: p.ID, Node: p.Node, Index: p.Index}
}

// ComputationState is the state of one attempt:
// PENDING → AVAILABLE → RUNNING → SUCCESS | FAILED | ABANDONED | CANCELED. A waiting attempt of a
// paused execution is PAUSED until Resume.
type ComputationState string

// Computation states.
const (
	StatePending   ComputationState = persistence.StatePending
	StateAvailable ComputationState = persistence.StateAvailable
	StateRunning   ComputationState = persistence.StateRunning
	StateSuccess   ComputationState = persistence.StateSuccess
	StateFailed    ComputationState = persistence.StateFailed
	StateAbandoned ComputationState = persistence.StateAbandoned
	StateCanceled  ComputationState = persistence.StateCanceled
	StatePaused    ComputationState = persistence.StatePaused
	// StateWaiting: a Map or Child node's attempt waits for its children to end.
	StateWaiting ComputationState = persistence.StateWaiting
)

// Computation is one attempt of a node, as Computations reports it.
type Computation struct {
	ID          int64
	Node        string
	State       ComputationState
	Attempt     int
	MaxAttempts int
	// ReplicaID is the replica that claimed the attempt, if any did.
	ReplicaID         string
	RunAt             time.Time
	ClaimedAt         *time.Time
	Deadline          *time.Time
	HeartbeatDeadline *time.Time
	LastHeartbeatAt   *time.Time
	FinishedAt        *time.Time
	// Error is the function's error, or the audit reason of an abandonment, such as
	// "abandoned: heartbeat deadline passed".
	Error     string
	CreatedAt time.Time
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func (r *Runtime) check() error {
	if r.stopped.Load() {
		return ErrStopped
	}
	if err := r.halted.Load(); err != nil {
		return *err
	}
	return nil
}

// StartOption modifies a Start.
type StartOption func(*startOptions)

type startOptions struct {
	values   map[string]any
	key      string
	priority int   // as WithPriority gave it
	prio     int16 // as the store takes it, once startArgs has checked it
}

// WithValues starts the execution with these input values set, as one change: the execution
// begins at revision 1, as if SetMany had set them right after Start, and the nodes they satisfy
// get their computations at once. A nil or empty map sets nothing.
func WithValues(values map[string]any) StartOption {
	return func(o *startOptions) { o.values = values }
}

// WithKey starts the execution with a business key, such as an order number or a webhook's
// delivery id: at most one unarchived execution of a graph (of any of its versions) holds a key,
// which the database enforces with a unique index, whichever replicas start it and however often.
// A Start with a key that an execution holds returns that execution, with Execution.Existing
// true and no error: it starts nothing, and its WithValues are not applied (Set them, if they
// must change). Of concurrent Starts with one key, one starts the execution and the others get
// it. Archiving the execution frees its key; unarchiving it fails with ErrKeyHeld if another
// execution holds the key by then.
//
// A key is valid UTF-8 with no NUL character, at most 1 KiB; another is refused with
// ErrInvalidText, and starts nothing. "" is no key. A graph.Singleton graph has its one key, and
// refuses another (ErrSingleton).
func WithKey(key string) StartOption {
	return func(o *startOptions) { o.key = key }
}

// WithPriority starts the execution with priority p, from 0 (the default) to graph.MaxPriority,
// which adds to the graph.Priority of each of its nodes: its attempts go ahead of others that
// became ready up to p minutes after them (see graph.Priority, which says how nothing starves).
func WithPriority(p int) StartOption {
	return func(o *startOptions) { o.priority = p }
}

// checkKey returns the error of key, given to a start of g, before any SQL: a singleton graph
// takes no key of its own, and a key must be storable text.
func checkKey(g *graph.Graph, key string) error {
	switch {
	case key == "":
		return nil
	case g.Singleton():
		return fmt.Errorf("%w: graph %q has the one key %q, and takes no other (%q); drop the key, or graph.Singleton()",
			ErrSingleton, g.Name(), graph.SingletonKey, key)
	}
	return persistence.CheckText("key", key)
}

// Start starts an execution of g, which must be registered in Config.Graphs, and advances it:
// nodes whose gate holds from the start get their computations at once. WithValues sets inputs
// in the same transaction; an unknown node, a node that is not an input, or a value that cannot
// be stored (ErrUnknownNode, ErrNotInput, ErrInvalidValue) starts nothing. With WithKey, or for a
// graph.Singleton graph, it starts nothing if an execution holds the key, and returns that one,
// with Existing true (see WithKey).
func (r *Runtime) Start(ctx context.Context, g *graph.Graph, opts ...StartOption) (*Execution, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	if g == nil {
		return nil, fmt.Errorf("%w: Start was given a nil graph", ErrUnknownGraph)
	}
	return traced(ctx, r, "journey.Start", graphAttrs(g), func(ctx context.Context) (*Execution, error) {
		ex, err := r.startOne(ctx, g, opts)
		if err == nil {
			span := trace.SpanFromContext(ctx)
			span.SetAttributes(telemetry.KeyExecution.String(ex.ID))
			if ex.Key != "" {
				span.SetAttributes(telemetry.KeyExecutionKey.String(ex.Key), telemetry.KeyExisting.Bool(ex.Existing))
			}
		}
		return ex, err
	})
}

// StartTx is Start in tx, a transaction of the application's, so that the application's rows
// and the execution commit together, or not at all: nothing of the execution is visible, and
// none of its work runs, before tx commits; after a rollback nothing of it is left. Its first
// work is announced by a NOTIFY that tx's COMMIT sends: a replica, this one or another, claims it
// then, with no poll. Until tx ends, an execution started with a key holds it: a Start with the
// same key waits for tx. An error leaves tx to the application, to roll back.
//
// The execution's Existing says, for a key, whether tx found it already there.
func (r *Runtime) StartTx(ctx context.Context, tx Tx, g *graph.Graph, opts ...StartOption) (*Execution, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	if g == nil {
		return nil, fmt.Errorf("%w: StartTx was given a nil graph", ErrUnknownGraph)
	}
	caller, err := callerOf("StartTx", tx)
	if err != nil {
		return nil, err
	}
	return traced(ctx, r, "journey.StartTx", graphAttrs(g), func(ctx context.Context) (*Execution, error) {
		set, o, err := r.startArgs(g, opts)
		if err != nil {
			return nil, err
		}
		execs, err := r.store.CreateExecutionsIn(ctx, caller, g, []map[string]json.RawMessage{set}, []string{o.key}, nil, []int16{o.prio})
		if err != nil {
			return nil, err
		}
		return toExecution(execs[0]), nil
	})
}

// Tx is a transaction of the application's, on the runtime's database, that StartTx, SetTx and
// SetManyTx write in: a pgx.Tx (a pgxpool.Pool's Begin, say), a *sql.Tx, through any PostgreSQL
// driver, or a bun.Tx. Through a pgx.Tx, a write's statements go in one round trip; through the
// others, one at a time.
type Tx any

// callerOf returns tx as the store takes it, or an error that says what was given to what.
func callerOf(what string, tx Tx) (persistence.Caller, error) {
	switch tx := tx.(type) {
	case pgx.Tx:
		if tx != nil {
			return persistence.Caller{Pgx: tx}, nil
		}
	case *sql.Tx:
		if tx != nil {
			return persistence.Caller{SQL: tx}, nil
		}
	case bun.Tx:
		if tx.Tx != nil {
			return persistence.Caller{SQL: tx.Tx}, nil
		}
	case *bun.Tx:
		if tx != nil && tx.Tx != nil {
			return persistence.Caller{SQL: tx.Tx}, nil
		}
	default:
		if tx != nil {
			return persistence.Caller{}, fmt.Errorf("journey: %s was given a %T: pass the application's transaction, a pgx.Tx, a *sql.Tx or a bun.Tx", what, tx)
		}
	}
	return persistence.Caller{}, fmt.Errorf("journey: %s was given no transaction: pass the application's transaction, a pgx.Tx, a *sql.Tx or a bun.Tx", what)
}

// startArgs are the values and the options of a Start of g with opts, checked.
func (r *Runtime) startArgs(g *graph.Graph, opts []StartOption) (map[string]json.RawMessage, startOptions, error) {
	var o startOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkKey(g, o.key); err != nil {
		return nil, o, err
	}
	var err error
	if o.prio, err = priority(o.priority); err != nil {
		return nil, o, err
	}
	set, err := r.inputs(g, o.values)
	return set, o, err
}

// priority checks p, a priority that a Start was given, and returns it as the store takes it.
func priority(p int) (int16, error) {
	if p < 0 || p > graph.MaxPriority {
		return 0, fmt.Errorf("%w: priority %d must be from 0 to %d; higher goes first", ErrInvalidValue, p, graph.MaxPriority)
	}
	return int16(p), nil
}

// startOne is Start, in its span.
func (r *Runtime) startOne(ctx context.Context, g *graph.Graph, opts []StartOption) (*Execution, error) {
	set, o, err := r.startArgs(g, opts)
	if err != nil {
		return nil, err
	}
	key, prio := o.key, o.prio
	// The id is chosen before the first try: a try made again, when the COMMIT of the one before
	// got no answer, gets the execution that one made, if it did, instead of a second.
	id := r.store.NewID(g, key)
	// A traced Start goes alone: the attempts it creates link to its own span.
	if trace.SpanContextFromContext(ctx).IsValid() {
		execs, err := r.store.CreateExecutions(ctx, g, []map[string]json.RawMessage{set}, []string{key}, []string{id}, []int16{prio})
		if err != nil {
			return nil, err
		}
		return toExecution(execs[0]), nil
	}
	if len(set) == 0 && r.store.StartsIdle(g) {
		w, err := r.writesOf(id).do(ctx, write{start: g, key: key, id: id, prio: prio})
		if err != nil {
			return nil, err
		}
		return toExecution(w.exec), nil
	}
	e, err := r.startsOf(g, id).do(ctx, start{set, key, id, prio})
	if err != nil {
		return nil, err
	}
	return toExecution(e), nil
}

// start is a Start of r.starts: the values of the inputs, the key, the execution's id and its
// priority.
type start struct {
	values  map[string]json.RawMessage
	key, id string
	prio    int16
}

// write is a call of r.writes: the Start of an execution of start with key (or none), id and no
// values, which starts idle (persistence.Store.StartsIdle), or else set. The INSERT of an idle
// Start goes with the COMMIT of the Sets that it meets, so that an application that starts an
// execution, then sets its input, pays about one transaction for both under load.
type write struct {
	start   *graph.Graph
	key, id string
	prio    int16
	set     persistence.Setting
}

// written is the answer to a write: the execution started, or the revision after the Set.
type written struct {
	exec *persistence.Execution
	rev  int64
}

// writeAll makes the writes of ws in one transaction.
func (r *Runtime) writeAll(ctx context.Context, ws []write) ([]written, error) {
	var starts []*graph.Graph
	var keys, ids []string
	var prios []int16
	var sets []persistence.Setting
	for _, w := range ws {
		if w.start != nil {
			starts, keys, ids, prios = append(starts, w.start), append(keys, w.key), append(ids, w.id), append(prios, w.prio)
		} else {
			sets = append(sets, w.set)
		}
	}
	execs, revs, err := r.store.Write(ctx, starts, keys, ids, prios, sets)
	if err != nil {
		return nil, err
	}
	out := make([]written, len(ws))
	for i, w := range ws {
		if w.start != nil {
			out[i].exec, execs = execs[0], execs[1:]
		} else {
			out[i].rev, revs = revs[0], revs[1:]
		}
	}
	return out, nil
}

// writesOf returns the group of the writes of execution id: on Citus, that of its lane.
func (r *Runtime) writesOf(id string) *group[write, written] {
	if len(r.writes) == 1 {
		return r.writes[0]
	}
	return r.writes[persistence.LaneOf(id)]
}

// startGroup is a key of r.starts: a graph, and on Citus a lane.
type startGroup struct {
	g    *graph.Graph
	lane int16
}

// startsOf returns the group that gathers the concurrent Starts of g into one transaction: on
// Citus, those of the lane of id (see writesOf).
func (r *Runtime) startsOf(g *graph.Graph, id string) *group[start, *persistence.Execution] {
	key := startGroup{g: g}
	if r.store.Distributed() {
		key.lane = persistence.LaneOf(id)
	}
	if s, ok := r.starts.Load(key); ok {
		return s.(*group[start, *persistence.Execution])
	}
	s, _ := r.starts.LoadOrStore(key, &group[start, *persistence.Execution]{
		max: groupMax,
		write: func(ctx context.Context, starts []start) ([]*persistence.Execution, error) {
			items := make([]map[string]json.RawMessage, len(starts))
			keys, ids, prios := make([]string, len(starts)), make([]string, len(starts)), make([]int16, len(starts))
			for i, s := range starts {
				items[i], keys[i], ids[i], prios[i] = s.values, s.key, s.id, s.prio
			}
			return r.store.CreateExecutions(ctx, g, items, keys, ids, prios)
		},
		again: func(start) bool { return true },
	})
	return s.(*group[start, *persistence.Execution])
}

// StartManyOption modifies a StartMany.
type StartManyOption func(*startManyOptions)

type startManyOptions struct {
	keys  []string
	prios []int
}

// WithKeys gives the executions of StartMany their keys, one per item of inputs, "" for none: each
// key as WithKey gives it to a Start. An item whose key an execution holds starts nothing and
// returns that execution, with Existing true, its values not applied; so does an item whose key
// an earlier item of the call has, which returns the same execution as that item.
func WithKeys(keys []string) StartManyOption {
	return func(o *startManyOptions) { o.keys = keys }
}

// WithPriorities gives the executions of StartMany their priorities, one per item of inputs, each
// as WithPriority gives it to a Start.
func WithPriorities(priorities []int) StartManyOption {
	return func(o *startManyOptions) { o.prios = priorities }
}

// StartMany starts one execution of g for each item of inputs, in one transaction, and returns
// them in the order given. Each item's values are set as WithValues sets them: as one change, at
// revision 1; a nil item starts an execution with no values. It is Start for bulk: the
// executions, their values and their history go in with one statement each for the whole call,
// which notifies the replicas once. WithKeys gives them keys (see WithKey); for a
// graph.Singleton graph, every item has its one key, so at most the first starts an execution.
//
// Bad input in any item fails the whole call and starts nothing: an unknown node
// (ErrUnknownNode), a node that is not an input (ErrNotInput), a value that is not
// JSON-encodable, larger than Config.MaxValueBytes or holding a NUL character (ErrInvalidValue),
// or a key that cannot be stored (ErrInvalidText). The error names the item as inputs[i], and
// the node or the key. Keys of another number than inputs fail it too. Empty inputs start
// nothing, and return an empty slice.
func (r *Runtime) StartMany(ctx context.Context, g *graph.Graph, inputs []map[string]any, opts ...StartManyOption) ([]*Execution, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	if g == nil {
		return nil, fmt.Errorf("%w: StartMany was given a nil graph", ErrUnknownGraph)
	}
	attrs := append(graphAttrs(g), telemetry.KeyExecutions.Int(len(inputs)))
	return traced(ctx, r, "journey.StartMany", attrs, func(ctx context.Context) ([]*Execution, error) {
		return r.startMany(ctx, g, inputs, opts)
	})
}

// startMany is StartMany, in its span.
func (r *Runtime) startMany(ctx context.Context, g *graph.Graph, inputs []map[string]any, opts []StartManyOption) ([]*Execution, error) {
	var o startManyOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.keys != nil && len(o.keys) != len(inputs) {
		return nil, fmt.Errorf("WithKeys was given %d keys for %d inputs: give one per input, \"\" for none", len(o.keys), len(inputs))
	}
	if o.prios != nil && len(o.prios) != len(inputs) {
		return nil, fmt.Errorf("WithPriorities was given %d priorities for %d inputs: give one per input, 0 for none", len(o.prios), len(inputs))
	}
	var prios []int16
	if o.prios != nil {
		prios = make([]int16, len(inputs))
	}
	items := make([]map[string]json.RawMessage, len(inputs))
	for i, values := range inputs {
		set, err := r.inputs(g, values)
		if err == nil && o.keys != nil {
			err = checkKey(g, o.keys[i])
		}
		if err == nil && prios != nil {
			prios[i], err = priority(o.prios[i])
		}
		if err != nil {
			return nil, fmt.Errorf("inputs[%d]: %w", i, err)
		}
		items[i] = set
	}
	execs, err := r.store.CreateExecutions(ctx, g, items, o.keys, nil, prios)
	if err != nil {
		return nil, err
	}
	out := make([]*Execution, len(execs))
	for i, e := range execs {
		out[i] = toExecution(e)
	}
	return out, nil
}

// inputs checks and encodes the values that start an execution of g, node by node in name order:
// each must be an input of g, with a value that can be stored.
func (r *Runtime) inputs(g *graph.Graph, values map[string]any) (map[string]json.RawMessage, error) {
	set := make(map[string]json.RawMessage, len(values))
	for _, node := range slices.Sorted(maps.Keys(values)) {
		if err := persistence.CheckInput(g, node); err != nil {
			return nil, err
		}
		raw, err := r.encode(fmt.Sprintf("node %q", node), values[node])
		if err != nil {
			return nil, err
		}
		set[node] = raw
	}
	return set, nil
}

// Load reads an execution. An archived one is ErrNotFound, unless IncludeArchived is given.
func (r *Runtime) Load(ctx context.Context, id string, opts ...LoadOption) (*Execution, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	var o loadOptions
	for _, opt := range opts {
		opt(&o)
	}
	e, err := r.store.LoadExecution(ctx, id)
	if err != nil {
		return nil, err
	}
	if e.ArchivedAt != nil && !o.includeArchived {
		return nil, fmt.Errorf("%w: %q is archived; Unarchive it, or pass journey.IncludeArchived()", ErrNotFound, id)
	}
	return toExecution(e), nil
}

// SetOption modifies a Set, SetMany or Unset.
type SetOption func(*setOptions)

type setOptions struct {
	metadata any
}

// WithMetadata attaches metadata (any JSON-encodable value) to the values set. The same value
// with different metadata is a change, and gets a new revision.
func WithMetadata(metadata any) SetOption {
	return func(o *setOptions) { o.metadata = metadata }
}

// Set sets an input node's value, persists it, and advances the execution. Setting the value a
// node already has (with the same metadata) changes nothing, and returns the current revision.
func (r *Runtime) Set(ctx context.Context, id, node string, value any, opts ...SetOption) (int64, error) {
	attrs := []attribute.KeyValue{telemetry.KeyExecution.String(id), telemetry.KeyNode.String(node)}
	return traced(ctx, r, "journey.Set", attrs, func(ctx context.Context) (int64, error) {
		return r.setMany(ctx, id, map[string]any{node: value}, opts)
	})
}

// SetMany sets several input nodes in one transaction, as one revision.
func (r *Runtime) SetMany(ctx context.Context, id string, values map[string]any, opts ...SetOption) (int64, error) {
	attrs := []attribute.KeyValue{telemetry.KeyExecution.String(id)}
	return traced(ctx, r, "journey.SetMany", attrs, func(ctx context.Context) (int64, error) {
		return r.setMany(ctx, id, values, opts)
	})
}

// SetTx is Set in tx, a transaction of the application's (see StartTx): the value is set, and
// the work it makes runs, once tx commits; after a rollback it is as if it had not been set.
// OnSave fires for it once tx has committed. The execution stays locked until tx ends: its other
// writes wait for tx. An error leaves tx to the application, to roll back.
//
// tx may be READ COMMITTED (PostgreSQL's default), REPEATABLE READ or SERIALIZABLE. In the last
// two, whose reads see the snapshot of tx's first statement, SetTx reads the execution's rows as
// committed, under its lock, and writes the values alone: the gates are evaluated, and the work
// made, once tx has committed (by this replica, or by the sweep's WakeDue if it stops first). A
// row that another transaction changed since tx's snapshot fails the write with PostgreSQL's
// serialization error (SQLSTATE 40001), as any write of tx would: retry tx.
func (r *Runtime) SetTx(ctx context.Context, tx Tx, id, node string, value any, opts ...SetOption) (int64, error) {
	return r.SetManyTx(ctx, tx, id, map[string]any{node: value}, opts...)
}

// SetManyTx is SetMany in tx, a transaction of the application's (see SetTx).
func (r *Runtime) SetManyTx(ctx context.Context, tx Tx, id string, values map[string]any, opts ...SetOption) (int64, error) {
	if err := r.check(); err != nil {
		return 0, err
	}
	caller, err := callerOf("SetTx", tx)
	if err != nil {
		return 0, err
	}
	attrs := []attribute.KeyValue{telemetry.KeyExecution.String(id)}
	return traced(ctx, r, "journey.SetTx", attrs, func(ctx context.Context) (int64, error) {
		setting, err := r.setting(id, values, opts)
		if err != nil {
			return 0, err
		}
		revs, err := r.store.SetValuesIn(ctx, caller, []persistence.Setting{setting})
		if err != nil {
			return 0, err
		}
		return revs[0], nil
	})
}

// setMany is Set and SetMany, in their span.
func (r *Runtime) setMany(ctx context.Context, id string, values map[string]any, opts []SetOption) (int64, error) {
	if err := r.check(); err != nil {
		return 0, err
	}
	setting, err := r.setting(id, values, opts)
	if err != nil {
		return 0, err // alone, before the group: it would fail the others' writes too
	}
	// A traced Set goes alone: the attempts it creates link to its own span.
	if trace.SpanContextFromContext(ctx).IsValid() {
		return r.store.SetValues(ctx, id, setting.Set, setting.Meta, nil)
	}
	w, err := r.writesOf(id).do(ctx, write{set: setting})
	return w.rev, err
}

// setting is the Setting of values with opts in execution id, encoded and checked.
func (r *Runtime) setting(id string, values map[string]any, opts []SetOption) (persistence.Setting, error) {
	var o setOptions
	for _, opt := range opts {
		opt(&o)
	}
	set := make(map[string]json.RawMessage, len(values))
	for node, v := range values {
		raw, err := r.encode(fmt.Sprintf("node %q", node), v)
		if err != nil {
			return persistence.Setting{}, err
		}
		set[node] = raw
	}
	var meta json.RawMessage
	if o.metadata != nil {
		raw, err := r.encode("metadata", o.metadata)
		if err != nil {
			return persistence.Setting{}, err
		}
		meta = raw
	}
	setting := persistence.Setting{ID: id, Set: set, Meta: meta}
	return setting, setting.Check()
}

// encode encodes a value or metadata given by the user, and checks that it can be stored. what
// names it in the error, which wraps ErrInvalidValue.
func (r *Runtime) encode(what string, v any) (json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err == nil {
		err = persistence.CheckValue(raw, r.cfg.MaxValueBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidValue, what, err)
	}
	return raw, nil
}

// Unset clears input nodes, and by invalidation every value that depends on them.
func (r *Runtime) Unset(ctx context.Context, id string, nodes ...string) (int64, error) {
	if err := r.check(); err != nil {
		return 0, err
	}
	return r.store.SetValues(ctx, id, nil, nil, nodes)
}

// GetOption makes Get wait.
type GetOption func(*getOptions)

type getOptions struct {
	wait  bool
	newer int64
}

// WaitAny makes Get wait until the node has a value.
func WaitAny() GetOption {
	return func(o *getOptions) { o.wait, o.newer = true, 0 }
}

// WaitNewerThan makes Get wait until the node has a value newer than revision rev.
func WaitNewerThan(rev int64) GetOption {
	return func(o *getOptions) { o.wait, o.newer = true, rev }
}

// maxPollBackoff is how many PollIntervals apart a waiting Get looks, at most, without a
// notification.
const maxPollBackoff = 16

// Get reads a node's value. With no option it answers at once (ErrNotSet when unset, ErrCanceled
// when unset in a canceled execution). With WaitAny or WaitNewerThan it waits until the value is
// there, the node fails (ErrComputationFailed), the execution is canceled (ErrCanceled), or ctx
// ends. Waiting is woken by the database's notifications, or, when
// a write of this replica sets the value, by that write once it has committed, which hands the
// value over without another read. The fallback, for a notification lost, is a look every
// Config.PollInterval at first, then less often, up to every 16 PollIntervals: thousands of
// waiters must not keep the pool busy. With Config.PollOnly, the look is the only way, and it
// comes every PollInterval.
func (r *Runtime) Get(ctx context.Context, id, node string, opts ...GetOption) (graph.Value, error) {
	if err := r.check(); err != nil {
		return graph.Value{}, err
	}
	var o getOptions
	for _, opt := range opts {
		opt(&o)
	}
	var poll *time.Timer
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	every := r.cfg.PollInterval
	for {
		var w *waiter
		var remove func()
		if o.wait {
			w, remove = r.waiters.add(id, node, o.newer)
		}
		v, seen, err := r.getOnce(ctx, id, node, o.newer)
		if !o.wait || !errors.Is(err, ErrNotSet) {
			if remove != nil {
				remove()
			}
			return v, err
		}
		w.settle(seen)
		if poll == nil {
			poll = time.NewTimer(every)
		}
		select {
		case <-ctx.Done():
			remove()
			return graph.Value{}, fmt.Errorf("waiting for %q in %s: %w", node, id, ctx.Err())
		case <-w.ch:
			if v := w.handed.Load(); v != nil {
				remove()
				return *v, nil
			}
		case <-poll.C:
			if !r.cfg.PollOnly { // where the poll is the only way to learn of another replica's writes
				every = min(2*every, maxPollBackoff*r.cfg.PollInterval)
			}
			poll.Reset(every)
		}
		remove()
	}
}

// getOnce returns the node's value if it is newer than rev, ErrComputationFailed if the node has
// failed for good, and ErrNotSet otherwise; and the execution's revision it read.
func (r *Runtime) getOnce(ctx context.Context, id, node string, rev int64) (graph.Value, int64, error) {
	ns, err := r.looks.do(ctx, persistence.NodeRef{ID: id, Node: node})
	if err != nil {
		return graph.Value{}, 0, err
	}
	if ns.Value.IsSet() && ns.Value.Revision > rev {
		return ns.Value, ns.Revision, nil
	}
	if ns.Failed() {
		c := ns.Latest
		return graph.Value{}, ns.Revision, fmt.Errorf("%w: node %q of %s %s: %s", ErrComputationFailed, node, id,
			persistence.Failure(c.State, c.Attempt, c.MaxAttempts, deref(c.Error)), deref(c.Error))
	}
	if ns.Canceled {
		return graph.Value{}, ns.Revision, fmt.Errorf("%w: node %q of %s has no value, and the execution is canceled", ErrCanceled, node, id)
	}
	return graph.Value{}, ns.Revision, fmt.Errorf("%w: node %q of %s", ErrNotSet, node, id)
}

// GetAs is Get, decoding the value into a T.
func GetAs[T any](ctx context.Context, r *Runtime, id, node string, opts ...GetOption) (T, error) {
	var out T
	v, err := r.Get(ctx, id, node, opts...)
	if err != nil {
		return out, err
	}
	if err := v.Decode(&out); err != nil {
		return out, fmt.Errorf("decoding %q of %s as %T: %w", node, id, out, err)
	}
	return out, nil
}

// Values reads every value set in an execution.
func (r *Runtime) Values(ctx context.Context, id string) (graph.Values, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	return r.store.Values(ctx, id)
}

// Computations lists every attempt of every node of an execution, oldest first, with its state,
// replica, times and error.
func (r *Runtime) Computations(ctx context.Context, id string) ([]Computation, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	rows, err := r.store.Computations(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]Computation, len(rows))
	for i, c := range rows {
		out[i] = Computation{
			ID: c.ID, Node: c.Node, State: ComputationState(c.State), Attempt: c.Attempt,
			MaxAttempts: c.MaxAttempts, ReplicaID: deref(c.ReplicaID), RunAt: c.RunAt,
			ClaimedAt: c.ClaimedAt, Deadline: c.Deadline, HeartbeatDeadline: c.HeartbeatDeadline,
			LastHeartbeatAt: c.LastHeartbeatAt, FinishedAt: c.FinishedAt, Error: deref(c.Error),
			CreatedAt: c.CreatedAt,
		}
	}
	return out, nil
}

// Summarize describes an execution in text: its values, its computations, and what each node
// without a value is waiting for.
func (r *Runtime) Summarize(ctx context.Context, id string) (string, error) {
	e, err := r.Load(ctx, id, IncludeArchived())
	if err != nil {
		return "", err
	}
	g, ok := r.store.Graph(e.Graph, e.Version)
	if !ok {
		return "", fmt.Errorf("%w: %q version %q", ErrUnknownGraph, e.Graph, e.Version)
	}
	vals, err := r.Values(ctx, id)
	if err != nil {
		return "", err
	}
	comps, err := r.Computations(ctx, id)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Execution %s of graph %q version %q", e.ID, e.Graph, e.Version)
	if e.Key != "" {
		fmt.Fprintf(&b, ", key %q", e.Key)
	}
	fmt.Fprintf(&b, ", revision %d\n", e.Revision)
	if p := e.Parent; p != nil {
		fmt.Fprintf(&b, "Child %d of node %s of execution %s\n", p.Index, p.Node, p.ID)
	}
	maps, err := r.store.Maps(ctx, id)
	if err != nil {
		return "", err
	}
	for _, m := range maps {
		fmt.Fprintf(&b, "Node %s started %d children: %d ended (journey executions show %s lists them)\n", m.Node, m.Total, m.Done, id)
	}
	b.WriteString("Values:\n")
	names := make([]string, 0, len(vals))
	for name := range vals {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&b, "  %s = %s (revision %d)\n", name, vals[name].Raw, vals[name].Revision)
	}
	if len(names) == 0 {
		b.WriteString("  (none)\n")
	}
	b.WriteString("Computations:\n")
	for _, c := range comps {
		fmt.Fprintf(&b, "  %s attempt %d/%d: %s", c.Node, c.Attempt, c.MaxAttempts, c.State)
		if c.Error != "" {
			fmt.Fprintf(&b, " (%s)", c.Error)
		}
		b.WriteString("\n")
	}
	if len(comps) == 0 {
		b.WriteString("  (none)\n")
	}
	latest := map[string]Computation{}
	for _, c := range comps {
		latest[c.Node] = c
	}
	for name, c := range latest {
		if c.State == StateFailed || c.State == StateAbandoned { // as Failed gates see them
			v := vals[name]
			v.Failed, v.Error = true, c.Error
			vals[name] = v
		}
	}
	b.WriteString("Waiting:\n")
	waiting := 0
	for _, n := range g.Nodes() {
		if n.Kind() == graph.KindInput || vals.Has(n.Name()) {
			continue
		}
		waiting++
		c, ran := latest[n.Name()]
		switch unmet := n.Gate().Unmet(vals); {
		case unmet != "":
			fmt.Fprintf(&b, "  %s: %s\n", n.Name(), unmet)
		case ran && (c.State == StateFailed || c.State == StateAbandoned):
			fmt.Fprintf(&b, "  %s: %s; Retry gives it a fresh budget\n", n.Name(),
				persistence.Failure(string(c.State), c.Attempt, c.MaxAttempts, c.Error))
		case ran:
			fmt.Fprintf(&b, "  %s: gate holds; attempt %d is %s\n", n.Name(), c.Attempt, c.State)
		default:
			fmt.Fprintf(&b, "  %s: gate holds\n", n.Name())
		}
	}
	if waiting == 0 {
		b.WriteString("  (nothing)\n")
	}
	return b.String(), nil
}

// Replica is a replica that heartbeats in the runtime's schema.
type Replica struct {
	ID            string
	LastHeartbeat time.Time
	StartedAt     time.Time
	// Graphs are the graphs it serves, as "name@version".
	Graphs []string
	// Stale is true when its heartbeat is older than its own ReplicaStaleAfter: its running work
	// is being reclaimed.
	Stale bool
}

// Replicas lists the replicas sharing the schema, with their last heartbeat, newest first.
func (r *Runtime) Replicas(ctx context.Context) ([]Replica, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	rows, err := r.store.Replicas(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Replica, len(rows))
	for i, row := range rows {
		out[i] = Replica{ID: row.ID, LastHeartbeat: row.LastHeartbeat, StartedAt: row.StartedAt, Graphs: row.Graphs, Stale: row.Stale}
	}
	return out, nil
}

// traced runs fn in a span named name, which records fn's error. The attempts that the write
// creates store the span's traceparent, and their spans link to it.
func traced[T any](ctx context.Context, r *Runtime, name string, attrs []attribute.KeyValue, fn func(ctx context.Context) (T, error)) (T, error) {
	ctx, span := r.tel.Tracer.Start(ctx, name, trace.WithAttributes(attrs...))
	defer span.End()
	v, err := fn(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return v, err
}

// graphAttrs are the span attributes that name g.
func graphAttrs(g *graph.Graph) []attribute.KeyValue {
	return []attribute.KeyValue{telemetry.KeyGraph.String(g.Name()), telemetry.KeyGraphVersion.String(g.Version())}
}

// lookAll reads the nodes of refs, for the looks of concurrent Gets (r.looks). A node's own error
// fails the group, whose looks are then made again each alone, so that each gets its own.
func (r *Runtime) lookAll(ctx context.Context, refs []persistence.NodeRef) ([]persistence.NodeState, error) {
	states, errs, err := r.store.NodeStates(ctx, refs)
	switch {
	case err != nil:
		return nil, err
	case len(refs) == 1:
		return states, errs[0]
	}
	return states, errors.Join(errs...)
}
