package graph

import (
	"context"
	"iter"
	"slices"
	"strings"
)

// Graph is a validated, immutable graph definition, built by New or MustNew. It is safe for
// concurrent use.
type Graph struct {
	name          string
	version       string
	nodes         []Node
	index         map[string]int // node name to its position in nodes
	order         []string
	downstream    map[string][]string
	onSave        func(ctx context.Context, e SaveEvent)
	idPrefix      string
	completesWhen Gate
	singleton     bool
}

// New builds a graph from its nodes, given in definition order, and checks it. It reports every
// problem it finds at once, joined with errors.Join, one line per problem naming the node it
// concerns; the error matches ErrInvalidGraph.
//
// The graph's name, its version and its nodes' names are each 1 to 255 bytes of valid UTF-8,
// with no NUL or other control character.
//
// The version tells deployed definitions of one graph apart: change it with any change of the
// nodes or options. The runtime records the definition served under each version (Describe,
// Fingerprint), and refuses a replica whose graph differs from it while executions of the
// version exist or another replica serves it.
func New(name, version string, nodes []Node, opts ...Option) (*Graph, error) {
	var o graphOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	g := &Graph{
		name:          name,
		version:       version,
		nodes:         slices.Clone(nodes),
		index:         make(map[string]int, len(nodes)),
		onSave:        o.onSave,
		idPrefix:      o.idPrefix,
		completesWhen: o.completesWhen,
		singleton:     o.singleton,
	}
	for i, n := range g.nodes {
		if _, dup := g.index[n.name]; !dup {
			g.index[n.name] = i
		}
	}
	if !o.idPrefixGiven {
		g.idPrefix = defaultIDPrefix(name)
	}

	order, cycles := g.topoSort()
	if err := g.validate(&o, cycles); err != nil {
		return nil, err
	}

	g.order = order
	g.downstream = make(map[string][]string, len(nodes))
	for _, name := range order {
		for _, up := range g.nodes[g.index[name]].upstream {
			g.downstream[up] = append(g.downstream[up], name)
		}
	}
	return g, nil
}

// MustNew is like New but panics with New's error. It suits graphs defined in package-level
// variables.
func MustNew(name, version string, nodes []Node, opts ...Option) *Graph {
	g, err := New(name, version, nodes, opts...)
	if err != nil {
		panic(err)
	}
	return g
}

// Name returns the graph's name.
func (g *Graph) Name() string { return g.name }

// Version returns the graph's version.
func (g *Graph) Version() string { return g.version }

// Nodes returns the nodes in definition order. The slice is a copy.
func (g *Graph) Nodes() []Node { return slices.Clone(g.nodes) }

// Node returns the node with the given name, and whether there is one.
func (g *Graph) Node(name string) (Node, bool) {
	i, ok := g.index[name]
	if !ok {
		return Node{}, false
	}
	return g.nodes[i], true
}

// Order returns the node names in topological order: every node comes after the nodes its gate
// references. Input nodes come first; otherwise ties are broken by definition order.
func (g *Graph) Order() []string { return slices.Clone(g.order) }

// InOrder yields the nodes in Order, copying nothing: the rules walk it on every write.
func (g *Graph) InOrder() iter.Seq[Node] {
	return func(yield func(Node) bool) {
		for _, name := range g.order {
			if !yield(g.nodes[g.index[name]]) {
				return
			}
		}
	}
}

// Downstream returns the names of the nodes whose gate references name directly, in Order.
func (g *Graph) Downstream(name string) []string { return slices.Clone(g.downstream[name]) }

// OnSave returns the graph's OnSave callback, set with WithOnSave, or nil.
func (g *Graph) OnSave() func(ctx context.Context, e SaveEvent) { return g.onSave }

// IDPrefix returns the prefix of the graph's execution IDs. See the IDPrefix option.
func (g *Graph) IDPrefix() string { return g.idPrefix }

// CompletesWhen returns the gate set with the CompletesWhen option, or nil.
func (g *Graph) CompletesWhen() Gate { return g.completesWhen }

// Singleton reports whether the graph was made with the Singleton option.
func (g *Graph) Singleton() bool { return g.singleton }

// defaultIDPrefix returns the first three ASCII letters or digits of name in upper case, or
// "EXE" when there are none.
func defaultIDPrefix(name string) string {
	var b strings.Builder
	for _, r := range name {
		if b.Len() == 3 {
			break
		}
		if isASCIIAlnum(r) {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "EXE"
	}
	return strings.ToUpper(b.String())
}

// isASCIIAlnum reports whether r is an ASCII letter or digit.
func isASCIIAlnum(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
}

// deps returns the positions of the known nodes that node i's gate references.
func (g *Graph) deps(i int) []int {
	var out []int
	for _, up := range g.nodes[i].upstream {
		if j, ok := g.index[up]; ok {
			out = append(out, j)
		}
	}
	return out
}

// topoSort orders the nodes as Order documents. Nodes that cannot be ordered lie on or
// downstream of a cycle; for those it returns the cycles found, each as node positions in
// which every node depends on the next and the last on the first.
func (g *Graph) topoSort() (order []string, cycles [][]int) {
	n := len(g.nodes)
	pending := make([]int, n) // count of known upstream nodes not yet placed
	dependents := make([][]int, n)
	for i := range g.nodes {
		if g.index[g.nodes[i].name] != i {
			continue // a duplicate name; New reports it, and the first definition stands
		}
		for _, j := range g.deps(i) {
			pending[i]++
			dependents[j] = append(dependents[j], i)
		}
	}

	placed := make([]bool, n)
	var ready []int // kept sorted by position
	place := func(i int) {
		placed[i] = true
		order = append(order, g.nodes[i].name)
		for _, d := range dependents[i] {
			if pending[d]--; pending[d] == 0 {
				pos, _ := slices.BinarySearch(ready, d)
				ready = slices.Insert(ready, pos, d)
			}
		}
	}
	// Inputs have no gate, so they are all ready at once; they go first.
	var inputs []int
	for i, node := range g.nodes {
		switch {
		case g.index[node.name] != i || pending[i] > 0:
			// A duplicate, or waiting on upstream nodes.
		case node.kind == KindInput:
			inputs = append(inputs, i)
		default:
			ready = append(ready, i)
		}
	}
	for _, i := range inputs {
		place(i)
	}
	for len(ready) > 0 {
		i := ready[0]
		ready = ready[1:]
		place(i)
	}
	return order, g.findCycles(placed)
}

// findCycles returns cycles among the nodes that topoSort could not place. Each such node has
// an unplaced upstream node, so walking from it along the first unplaced upstream node always
// comes back to a node already on the walk. Every cycle is rotated to start at its first node
// in definition order, and reported once.
func (g *Graph) findCycles(placed []bool) [][]int {
	var cycles [][]int
	onCycle := make([]bool, len(g.nodes))
	for start := range g.nodes {
		if placed[start] || onCycle[start] || g.index[g.nodes[start].name] != start {
			continue
		}
		seen := map[int]int{} // node position to its place on the walk
		var walk []int
		for i := start; ; {
			if at, ok := seen[i]; ok {
				walk = walk[at:]
				break
			}
			seen[i] = len(walk)
			walk = append(walk, i)
			for _, j := range g.deps(i) {
				if !placed[j] {
					i = j
					break
				}
			}
		}
		if slices.ContainsFunc(walk, func(i int) bool { return onCycle[i] }) {
			continue // reached a cycle already reported
		}
		first := slices.Index(walk, slices.Min(walk))
		cycle := append(slices.Clone(walk[first:]), walk[:first]...)
		for _, i := range cycle {
			onCycle[i] = true
		}
		cycles = append(cycles, cycle)
	}
	return cycles
}
