package graph

import (
	"context"
	"iter"
	"slices"
	"time"
)

// ComputeFunc computes a node's value. in holds every value set in the execution, the node's
// own previous value included. The result must be JSON-encodable. A returned error makes the
// runtime retry, unless it is marked with Permanent. ctx is cancelled when the computation
// loses its claim, is abandoned, or the runtime stops.
type ComputeFunc func(ctx context.Context, in Values) (any, error)

// TickFunc returns when a tick node becomes due. The zero time means "don't fire"; for a
// recurring tick it means "pause". Errors are treated as for ComputeFunc. Compute the time from
// journey.Now(ctx) rather than time.Now(): the two agree in production, and in tests
// (package journeytest) the first follows the test's clock, so that a test can make the tick due.
type TickFunc func(ctx context.Context, in Values) (time.Time, error)

// Node is the definition of one node of a graph. It is built by Input, Compute, Mutate,
// TickOnce, TickRecurring, Historian, Archive, Map or Child, and checked by New. A Node is immutable.
type Node struct {
	name     string
	kind     Kind
	gate     Gate
	fn       ComputeFunc
	tick     TickFunc
	targets  []string
	upstream []string
	opts     nodeOptions
	// child and each are a map node's: the graph of its children, and the function that gives
	// their inputs; one is set for a Child, which has one child and takes its result as its value.
	child *Graph
	each  EachFunc
	one   bool
}

// EachFunc returns the inputs of the children that a Map node starts, one map of input values
// for each child, in order. It must be a function of its values alone: the runtime may call it
// again for the same values (after a crash, say), and each child is known by its place in the
// list.
type EachFunc func(in Values) ([]map[string]any, error)

// newNode builds a node of any kind and applies its options.
func newNode(name string, kind Kind, gate Gate, opts []NodeOption) Node {
	n := Node{
		name: name,
		kind: kind,
		gate: gate,
		opts: nodeOptions{settings: defaultSettings()},
	}
	if gate != nil {
		n.upstream = slices.Compact(slices.Sorted(slices.Values(gate.Nodes())))
	}
	for _, opt := range opts {
		if opt != nil {
			opt(&n.opts)
		}
	}
	return n
}

// Input returns a node whose value is set from outside, with journey's Set. It takes no
// options but OnSave.
func Input(name string, opts ...NodeOption) Node {
	return newNode(name, KindInput, nil, opts)
}

// Compute returns a node whose value fn computes once gate holds, and again whenever an
// upstream value changes while gate holds. Its value is cleared when gate stops holding.
func Compute(name string, gate Gate, fn ComputeFunc, opts ...NodeOption) Node {
	n := newNode(name, KindCompute, gate, opts)
	n.fn = fn
	return n
}

// Mutate returns a node whose fn result, once gate holds, is written into each of the target
// input nodes, in one transaction. Its own value records what it updated. The targets keep
// their revisions unless UpdateRevisionOnChange is given.
func Mutate(name string, gate Gate, fn ComputeFunc, targets []string, opts ...NodeOption) Node {
	n := newNode(name, KindMutate, gate, opts)
	n.fn = fn
	n.targets = slices.Clone(targets)
	return n
}

// TickOnce returns a node that, once gate holds, calls fn for the time at which it becomes
// due. Nodes gated on it unblock then.
func TickOnce(name string, gate Gate, fn TickFunc, opts ...NodeOption) Node {
	n := newNode(name, KindTickOnce, gate, opts)
	n.tick = fn
	return n
}

// TickRecurring returns a node like TickOnce whose fn is called again after each due time,
// with a fresh attempt budget for each cycle. The zero time pauses it.
func TickRecurring(name string, gate Gate, fn TickFunc, opts ...NodeOption) Node {
	n := newNode(name, KindTickRecurring, gate, opts)
	n.tick = fn
	return n
}

// Historian returns a node that keeps a newest-first list of the changes of the nodes its gate
// names, up to MaxEntries. Its value is never cleared by invalidation.
func Historian(name string, gate Gate, opts ...NodeOption) Node {
	return newNode(name, KindHistorian, gate, opts)
}

// Archive returns a node that archives the execution once gate holds. Its value is the time
// of archiving.
func Archive(name string, gate Gate, opts ...NodeOption) Node {
	return newNode(name, KindArchive, gate, opts)
}

// Map returns a node that, once gate holds, starts one execution of child for each item that
// each returns, with those input values, and whose value is the list of the children's results,
// in the order of the items, once every child has completed (child's CompletesWhen). The
// Result option names the child's node whose value is an item's result; without it, a result is
// the object of the child's values, by node. A child that fails for good fails the node, with
// the child's id and error, unless CollectFailures is given.
//
// The children are known by the execution, the node and their place in the list: a Map that is
// retried, or runs again after a crash, finds the children it started, and never starts a second
// one for an item. When an upstream value changes and the node is computed again, the children
// of the values before are canceled and archived, and new ones start.
func Map(name string, gate Gate, child *Graph, each EachFunc, opts ...NodeOption) Node {
	n := newNode(name, KindMap, gate, opts)
	n.child, n.each = child, each
	return n
}

// Child returns a node that, once gate holds, starts one execution of child with the input
// values that inputs returns, and whose value is the child's result once it has completed: Map
// of one item, whose value is that item's result rather than a list.
func Child(name string, gate Gate, child *Graph, inputs func(in Values) (map[string]any, error), opts ...NodeOption) Node {
	n := newNode(name, KindMap, gate, opts)
	n.child, n.one = child, true
	if inputs != nil {
		n.each = func(in Values) ([]map[string]any, error) {
			item, err := inputs(in)
			if err != nil {
				return nil, err
			}
			return []map[string]any{item}, nil
		}
	}
	return n
}

// ChildGraph returns the graph whose executions a map node starts, and nil for other kinds.
func (n Node) ChildGraph() *Graph { return n.child }

// Each returns the function that gives a map node's items; for a Child, a list of one.
func (n Node) Each() EachFunc { return n.each }

// One reports whether a map node is a Child: its value is its one child's result, not a list.
func (n Node) One() bool { return n.one }

// Name returns the node's name.
func (n Node) Name() string { return n.name }

// Kind returns the node's kind.
func (n Node) Kind() Kind { return n.kind }

// Gate returns the node's gate. It is nil for input nodes.
func (n Node) Gate() Gate { return n.gate }

// Func returns the function of a compute or mutate node, and nil for other kinds.
func (n Node) Func() ComputeFunc { return n.fn }

// Tick returns the function of a tick node, and nil for other kinds.
func (n Node) Tick() TickFunc { return n.tick }

// Targets returns a copy of a mutate node's targets, and nil for other kinds.
func (n Node) Targets() []string { return slices.Clone(n.targets) }

// Upstream returns the sorted, deduplicated names of the nodes the gate references. It is nil
// for input nodes.
func (n Node) Upstream() []string { return slices.Clone(n.upstream) }

// Upstreams yields the names Upstream returns, copying nothing.
func (n Node) Upstreams() iter.Seq[string] { return slices.Values(n.upstream) }

// Settings returns the node's options, with defaults in place of those not given.
func (n Node) Settings() Settings { return n.opts.settings }
