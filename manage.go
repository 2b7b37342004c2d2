package journey

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/journey-go/journey/persistence"
)

// LoadOption modifies Load.
type LoadOption func(*loadOptions)

type loadOptions struct{ includeArchived bool }

// IncludeArchived makes Load return an archived execution instead of ErrNotFound.
func IncludeArchived() LoadOption {
	return func(o *loadOptions) { o.includeArchived = true }
}

// Archive archives an execution: Load and List leave it out unless asked, and its computations
// are neither claimed nor swept. It frees the execution's key, if it has one: the next Start with
// the key starts a new execution. An archive node does the same when its gate holds. Its children
// (graph.Map, graph.Child) are archived with it once it has committed; a child archived has ended
// for its parent's map node.
func (r *Runtime) Archive(ctx context.Context, id string) error {
	if err := r.check(); err != nil {
		return err
	}
	return r.store.SetArchived(ctx, id, true)
}

// Cancel cancels an execution, for reason: it stops for good. Its attempts that wait end
// CANCELED at once. Its running ones have their contexts canceled on whichever replica runs them
// (woken by the NOTIFY of the cancel, within milliseconds; a replica that misses it learns at the
// attempt's next heartbeat), and end CANCELED once their functions return, their results dropped:
// until then they keep their concurrency slots, so that a key or a limit never has two holders
// whose functions run. Nothing new is created or claimed: a Set still records its values, and
// nothing runs of them. Get of a node with no value answers ErrCanceled, and a waiting Get ends
// with it. OnExecutionCanceled and the webhooks' execution.canceled fire once, across replicas.
// Its children (graph.Map, graph.Child) are canceled with it once it has committed (and by the
// sweep, should this replica stop first).
//
// Canceling a canceled execution changes nothing, and returns nil. A canceled execution keeps its
// key, as a completed one does: a Start with the key returns it (Existing). Archive it to free
// the key; archived or not, it stays canceled.
func (r *Runtime) Cancel(ctx context.Context, id, reason string) error {
	if err := r.check(); err != nil {
		return err
	}
	return r.store.Cancel(ctx, id, reason)
}

// Pause pauses an execution: nothing of it is claimed or promoted until Resume. Its waiting
// attempts, and those that its writes make meanwhile (a Set, a tick that comes due, a running
// attempt's end, a map node whose children have ended, an attempt released at a Stop), wait
// PAUSED, which no claim reads: a paused execution costs the claims of others nothing. Its running
// attempts run on, and finish. Its children follow, as they do Resume. Pausing a paused execution
// changes nothing; a canceled one stays canceled.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	if err := r.check(); err != nil {
		return err
	}
	return r.store.SetPaused(ctx, id, true)
}

// Resume resumes a paused execution: what waits runs, in the order it came due, on whichever
// replicas claim it. Resuming an execution that is not paused changes nothing.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	if err := r.check(); err != nil {
		return err
	}
	return r.store.SetPaused(ctx, id, false)
}

// PauseGraph pauses a graph version: no replica claims its work until ResumeGraph. The waiting
// attempts of its executions wait PAUSED, which no claim reads, so a paused version costs the
// claims of other graphs nothing; running attempts finish; the attempts that writes make
// meanwhile (Starts, Sets, ticks come due) wait too. The replicas hear it by NOTIFY (a PollOnly
// replica at its next heartbeat). Pausing a paused version changes nothing; a version that no
// replica has recorded is ErrUnknownGraph.
func (r *Runtime) PauseGraph(ctx context.Context, name, version string) error {
	if err := r.check(); err != nil {
		return err
	}
	return r.setGraphPaused(ctx, name, version, true)
}

// ResumeGraph resumes a paused graph version: what waits runs, in the order it came due; the
// executions paused one by one (Pause) stay paused.
func (r *Runtime) ResumeGraph(ctx context.Context, name, version string) error {
	if err := r.check(); err != nil {
		return err
	}
	return r.setGraphPaused(ctx, name, version, false)
}

// setGraphPaused pauses or resumes a graph version, and reads the paused versions again at once,
// so that this replica's next claims and writes follow it without waiting for the NOTIFY.
func (r *Runtime) setGraphPaused(ctx context.Context, name, version string, paused bool) error {
	if _, err := r.store.SetGraphPaused(ctx, name, version, paused); err != nil {
		return err
	}
	return r.store.RefreshPaused(ctx)
}

// Unarchive brings an archived execution back: the attempts that archiving canceled wait again,
// unless it was canceled meanwhile, which nothing undoes. If it was started with a key that another
// unarchived execution of its graph holds by then, it fails with ErrKeyHeld and changes nothing.
// Its children stay archived: they ended for its map nodes when they were archived, and a map node
// that waited for them collects them now.
func (r *Runtime) Unarchive(ctx context.Context, id string) error {
	if err := r.check(); err != nil {
		return err
	}
	return r.store.SetArchived(ctx, id, false)
}

// Retry gives a node that failed for good (ErrComputationFailed) a fresh attempt budget.
// It also re-arms the failure notification.
func (r *Runtime) Retry(ctx context.Context, id, node string) error {
	if err := r.check(); err != nil {
		return err
	}
	return r.store.Retry(ctx, id, node)
}

// MoveVersion moves every execution of graph name at version from to version to, and returns how
// many it moved: the way out for executions that a deploy left on a version that no replica
// serves any more (journey graphs shows them STRANDED). to must keep every node of from, under
// the same name and of the same kind, and may add nodes; both must have been served by a replica
// (to by this one, say); no live replica may serve from any more; and no attempt of from may be
// running (wait for it, or for the sweeper to abandon it). Otherwise it fails, naming why
// (ErrIncompatibleVersions, ErrUnknownGraph), and changes nothing. The moved executions advance
// by the gates of to at the next sweep.
func (r *Runtime) MoveVersion(ctx context.Context, name, from, to string) (int64, error) {
	if err := r.check(); err != nil {
		return 0, err
	}
	return r.store.MoveVersion(ctx, name, from, to)
}

// FindByKey returns the unarchived execution of graph name, of any version, that holds key (see
// WithKey), or ErrNotFound. The executions of a graph.Singleton graph hold graph.SingletonKey.
// The graph need not be served by this replica.
func (r *Runtime) FindByKey(ctx context.Context, name, key string) (*Execution, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	e, err := r.store.FindByKey(ctx, name, key)
	if err != nil {
		return nil, err
	}
	return toExecution(e), nil
}

// HistoryEntry is one change of one value.
type HistoryEntry struct {
	Node string
	// Value is nil when the value was cleared (by Unset or invalidation).
	Value    json.RawMessage
	Metadata json.RawMessage
	Revision int64
	At       time.Time
}

// History lists every change of every value of an execution, oldest first.
func (r *Runtime) History(ctx context.Context, id string) ([]HistoryEntry, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	changes, err := r.store.History(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]HistoryEntry, len(changes))
	for i, c := range changes {
		out[i] = HistoryEntry(c)
	}
	return out, nil
}

// Op is a ListQuery filter operator.
type Op string

// Filter operators.
const (
	OpEq     Op = persistence.OpEq
	OpNeq    Op = persistence.OpNeq
	OpLt     Op = persistence.OpLt
	OpLte    Op = persistence.OpLte
	OpGt     Op = persistence.OpGt
	OpGte    Op = persistence.OpGte
	OpIn     Op = persistence.OpIn
	OpSet    Op = persistence.OpSet
	OpNotSet Op = persistence.OpNotSet
)

// Filter keeps the executions whose node's value satisfies Op. Value is compared as JSON (jsonb):
// numbers as numbers, strings as strings. For OpIn, Value is a slice of the accepted values.
// A comparison (eq, neq, lt, ...) never matches an execution where the node is not set.
type Filter struct {
	Node  string
	Op    Op
	Value any
}

// Eq keeps the executions where node equals v.
func Eq(node string, v any) Filter { return Filter{node, OpEq, v} }

// Neq keeps the executions where node is set and differs from v.
func Neq(node string, v any) Filter { return Filter{node, OpNeq, v} }

// Lt keeps the executions where node is less than v.
func Lt(node string, v any) Filter { return Filter{node, OpLt, v} }

// Lte keeps the executions where node is at most v.
func Lte(node string, v any) Filter { return Filter{node, OpLte, v} }

// Gt keeps the executions where node is greater than v.
func Gt(node string, v any) Filter { return Filter{node, OpGt, v} }

// Gte keeps the executions where node is at least v.
func Gte(node string, v any) Filter { return Filter{node, OpGte, v} }

// In keeps the executions where node equals one of vs.
func In(node string, vs ...any) Filter { return Filter{node, OpIn, vs} }

// IsSet keeps the executions where node has a value.
func IsSet(node string) Filter { return Filter{Node: node, Op: OpSet} }

// NotSet keeps the executions where node has no value.
func NotSet(node string) Filter { return Filter{Node: node, Op: OpNotSet} }

// ListQuery selects executions for List and Count.
type ListQuery struct {
	// Graph and Version, when set, keep the executions of that graph (and version).
	Graph, Version string
	// Key, when set, keeps the executions started with that key: the one that holds it, and,
	// with IncludeArchived, those that held it before. It is found in an index.
	Key string
	// Filters must all hold.
	Filters []Filter
	// OrderBy is a column (id, created_at, updated_at, revision) or a node name, whose values sort
	// as jsonb with unset last. Default created_at.
	OrderBy string
	// Desc sorts in descending order.
	Desc bool
	// Limit (0: no limit) and Offset page the results.
	Limit, Offset int
	// IncludeArchived includes archived executions.
	IncludeArchived bool
	// State, when set, keeps the executions in that state, as `journey executions list --state`
	// and the dashboard show it: archived, canceled, paused, failed, running, waiting, completed or idle
	// (the first that applies). State "archived" includes the archived executions.
	State string
}

func (q ListQuery) toStore() (persistence.ListQuery, error) {
	out := persistence.ListQuery{
		Graph: q.Graph, Version: q.Version, Key: q.Key, OrderBy: q.OrderBy, Desc: q.Desc,
		Limit: q.Limit, Offset: q.Offset, IncludeArchived: q.IncludeArchived, State: q.State,
	}
	for _, f := range q.Filters {
		pf := persistence.Filter{Node: f.Node, Op: string(f.Op)}
		switch f.Op {
		case OpIn:
			vs, ok := f.Value.([]any)
			if !ok {
				return out, fmt.Errorf("%w: the value of an in filter on %q must be a []any; use journey.In", ErrInvalidValue, f.Node)
			}
			for _, v := range vs {
				raw, err := json.Marshal(v)
				if err != nil {
					return out, fmt.Errorf("%w: filter on %q: %w", ErrInvalidValue, f.Node, err)
				}
				pf.In = append(pf.In, raw)
			}
		case OpSet, OpNotSet:
		default:
			raw, err := json.Marshal(f.Value)
			if err != nil {
				return out, fmt.Errorf("%w: filter on %q: %w", ErrInvalidValue, f.Node, err)
			}
			pf.Value = raw
		}
		out.Filters = append(out.Filters, pf)
	}
	return out, nil
}

// List returns the executions that match q.
func (r *Runtime) List(ctx context.Context, q ListQuery) ([]*Execution, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	sq, err := q.toStore()
	if err != nil {
		return nil, err
	}
	rows, err := r.store.ListExecutions(ctx, sq)
	if err != nil {
		return nil, err
	}
	out := make([]*Execution, len(rows))
	for i := range rows {
		out[i] = toExecution(&rows[i])
	}
	return out, nil
}

// Count counts the executions that match q, ignoring its order, limit and offset.
func (r *Runtime) Count(ctx context.Context, q ListQuery) (int64, error) {
	if err := r.check(); err != nil {
		return 0, err
	}
	sq, err := q.toStore()
	if err != nil {
		return 0, err
	}
	return r.store.CountExecutions(ctx, sq)
}
