package graph

import (
	"fmt"
	"strings"
)

// Gate decides when a node may run. The runtime evaluates it against the values of an
// execution; a node is "provided" when vals.Has(name). What the runtime puts into vals decides
// the finer points: a tick, for instance, is presented only once it is due.
//
// The gates of this package are built with Needs, And, Or, Not, Provided, IsTrue, IsFalse, When
// and Failed, and they nest.
type Gate interface {
	// Holds reports whether the gate is satisfied by vals. It must not change vals, which may be
	// the runtime's own.
	Holds(vals Values) bool
	// Nodes returns the names of the nodes the gate references. It may hold duplicates;
	// Node.Upstream removes them.
	Nodes() []string
	// Unmet describes, in readable text, the parts of the gate that vals does not satisfy,
	// such as `needs "email"` or `not (provided "flag")`. It is "" exactly when Holds is true.
	Unmet(vals Values) string
	// String renders the gate, such as `and(needs(name, email), not(provided(flag)))`.
	String() string
}

// describer is implemented by the gates of this package. describe renders the condition the
// gate asks for, in the words Unmet uses, so that Not can say what it does not want.
type describer interface {
	describe() string
}

// checker is implemented by the gates of this package. check returns the problems of a gate
// built with a missing part, such as When with a nil predicate, for New to report.
type checker interface {
	check() []string
}

// describe returns the readable condition of g, falling back on its String for gates defined
// outside this package.
func describe(g Gate) string {
	if g == nil {
		return "<nil gate>"
	}
	if d, ok := g.(describer); ok {
		return d.describe()
	}
	return g.String()
}

// checkGate returns the construction problems of g and, for gates of this package, of the
// gates nested in it.
func checkGate(g Gate) []string {
	if g == nil {
		return []string{"gate is nil"}
	}
	if c, ok := g.(checker); ok {
		return c.check()
	}
	return nil
}

// gateString renders g, tolerating nil.
func gateString(g Gate) string {
	if g == nil {
		return "<nil>"
	}
	return g.String()
}

// needsGate holds when all of its nodes are provided.
type needsGate struct{ names []string }

// Needs returns a gate that holds when all of the nodes are provided. Needs() with no nodes
// always holds, so its node runs as soon as the execution starts.
func Needs(nodes ...string) Gate {
	return needsGate{names: append([]string(nil), nodes...)}
}

func (g needsGate) Holds(vals Values) bool {
	for _, n := range g.names {
		if !vals.Has(n) {
			return false
		}
	}
	return true
}

func (g needsGate) Nodes() []string { return append([]string(nil), g.names...) }

func (g needsGate) Unmet(vals Values) string {
	var missing []string
	for _, n := range g.names {
		if !vals.Has(n) {
			missing = append(missing, fmt.Sprintf("needs %q", n))
		}
	}
	return strings.Join(missing, "; ")
}

func (g needsGate) String() string { return "needs(" + strings.Join(g.names, ", ") + ")" }

func (g needsGate) describe() string {
	if len(g.names) == 0 {
		return "needs nothing"
	}
	return "needs " + quoteAll(g.names)
}

// andGate holds when all of its gates hold.
type andGate struct{ gates []Gate }

// And returns a gate that holds when all of the gates hold. And() with no gates always holds.
func And(gates ...Gate) Gate {
	return andGate{gates: append([]Gate(nil), gates...)}
}

func (g andGate) Holds(vals Values) bool {
	for _, c := range g.gates {
		if c == nil || !c.Holds(vals) {
			return false
		}
	}
	return true
}

func (g andGate) Nodes() []string { return nodesOf(g.gates) }

func (g andGate) Unmet(vals Values) string {
	var parts []string
	for _, c := range g.gates {
		switch {
		case c == nil:
			parts = append(parts, "<nil gate>")
		case !c.Holds(vals):
			parts = append(parts, c.Unmet(vals))
		}
	}
	return strings.Join(parts, "; ")
}

func (g andGate) String() string { return "and(" + joinGates(g.gates) + ")" }

func (g andGate) describe() string { return describeAll(g.gates, " and ") }

func (g andGate) check() []string { return checkAll("and", g.gates) }

// orGate holds when any of its gates holds.
type orGate struct{ gates []Gate }

// Or returns a gate that holds when at least one of the gates holds. An Or with no gates would
// never hold, and New rejects it.
func Or(gates ...Gate) Gate {
	return orGate{gates: append([]Gate(nil), gates...)}
}

func (g orGate) Holds(vals Values) bool {
	for _, c := range g.gates {
		if c != nil && c.Holds(vals) {
			return true
		}
	}
	return false
}

func (g orGate) Nodes() []string { return nodesOf(g.gates) }

func (g orGate) Unmet(vals Values) string {
	if g.Holds(vals) {
		return ""
	}
	if len(g.gates) == 0 {
		return "or() with no gates never holds"
	}
	parts := make([]string, 0, len(g.gates))
	for _, c := range g.gates {
		if c == nil {
			parts = append(parts, "(<nil gate>)")
			continue
		}
		parts = append(parts, "("+c.Unmet(vals)+")")
	}
	return "one of: " + strings.Join(parts, " or ")
}

func (g orGate) String() string { return "or(" + joinGates(g.gates) + ")" }

func (g orGate) describe() string { return describeAll(g.gates, " or ") }

func (g orGate) check() []string {
	probs := checkAll("or", g.gates)
	if len(g.gates) == 0 {
		probs = append(probs, "or() has no gates and would never hold")
	}
	return probs
}

// notGate holds when its gate does not.
type notGate struct{ gate Gate }

// Not returns a gate that holds when g does not. Not(Provided("flag")) holds at start, and
// stops holding once flag is set.
func Not(g Gate) Gate { return notGate{gate: g} }

func (g notGate) Holds(vals Values) bool {
	return g.gate != nil && !g.gate.Holds(vals)
}

func (g notGate) Nodes() []string {
	if g.gate == nil {
		return nil
	}
	return g.gate.Nodes()
}

func (g notGate) Unmet(vals Values) string {
	if g.Holds(vals) {
		return ""
	}
	return "not (" + describe(g.gate) + ")"
}

func (g notGate) String() string { return "not(" + gateString(g.gate) + ")" }

func (g notGate) describe() string { return "not (" + describe(g.gate) + ")" }

func (g notGate) check() []string {
	if g.gate == nil {
		return []string{"not() has a nil gate"}
	}
	return checkGate(g.gate)
}

// providedGate holds when its node is provided.
type providedGate struct{ name string }

// Provided returns a gate that holds when the node is provided. For a tick node, provided
// means due.
func Provided(node string) Gate { return providedGate{name: node} }

func (g providedGate) Holds(vals Values) bool { return vals.Has(g.name) }

func (g providedGate) Nodes() []string { return []string{g.name} }

func (g providedGate) Unmet(vals Values) string {
	if g.Holds(vals) {
		return ""
	}
	return fmt.Sprintf("needs %q", g.name)
}

func (g providedGate) String() string { return "provided(" + g.name + ")" }

func (g providedGate) describe() string { return fmt.Sprintf("provided %q", g.name) }

// boolGate holds when its node is provided and is the JSON literal want.
type boolGate struct {
	name string
	want bool
}

// IsTrue returns a gate that holds when the node is provided and its value is the JSON
// literal true.
func IsTrue(node string) Gate { return boolGate{name: node, want: true} }

// IsFalse returns a gate that holds when the node is provided and its value is the JSON
// literal false. A node that is not provided is neither true nor false.
func IsFalse(node string) Gate { return boolGate{name: node, want: false} }

func (g boolGate) Holds(vals Values) bool {
	v := vals[g.name]
	if !v.IsSet() {
		return false
	}
	if g.want {
		return v.Bool()
	}
	return v.isFalse()
}

func (g boolGate) Nodes() []string { return []string{g.name} }

func (g boolGate) Unmet(vals Values) string {
	switch {
	case g.Holds(vals):
		return ""
	case !vals.Has(g.name):
		return fmt.Sprintf("needs %q", g.name)
	default:
		return fmt.Sprintf("%q is not %t", g.name, g.want)
	}
}

func (g boolGate) String() string {
	if g.want {
		return "is_true(" + g.name + ")"
	}
	return "is_false(" + g.name + ")"
}

func (g boolGate) describe() string { return fmt.Sprintf("%q is %t", g.name, g.want) }

// whenGate holds when its predicate accepts the node's value.
type whenGate struct {
	name string
	pred func(Value) bool
}

// When returns a gate that holds when pred accepts the node's value. When the node is not set,
// pred receives the zero Value, so it can tell with v.IsSet(). A nil pred is rejected by New.
func When(node string, pred func(Value) bool) Gate { return whenGate{name: node, pred: pred} }

func (g whenGate) Holds(vals Values) bool {
	return g.pred != nil && g.pred(vals[g.name])
}

func (g whenGate) Nodes() []string { return []string{g.name} }

func (g whenGate) Unmet(vals Values) string {
	if g.Holds(vals) {
		return ""
	}
	return fmt.Sprintf("%q does not satisfy predicate", g.name)
}

func (g whenGate) String() string { return "when(" + g.name + ")" }

func (g whenGate) describe() string { return fmt.Sprintf("%q satisfies predicate", g.name) }

func (g whenGate) check() []string {
	if g.pred == nil {
		return []string{fmt.Sprintf("when(%s) has a nil predicate", g.name)}
	}
	return nil
}

// failedGate holds while its node has failed for good.
type failedGate struct{ name string }

// Failed returns a gate that holds while the node has failed for good: its attempts are used up,
// or it returned a Permanent error. A compensation node gated on it runs, with retries and
// history, like any other node:
//
//	graph.Compute("restock", graph.Failed("charge"), giveStockBack)
//
// The gate stops holding when the failed node runs again (Retry, or new upstream values): the
// compensation's value is then cleared, as any compute node's is when its gate stops holding,
// and it runs again if the node fails for good again. The node must be one that runs: a
// compute, mutate or tick node.
func Failed(node string) Gate { return failedGate{name: node} }

func (g failedGate) Holds(vals Values) bool { return vals.Failed(g.name) }

func (g failedGate) Nodes() []string { return []string{g.name} }

func (g failedGate) Unmet(vals Values) string {
	if g.Holds(vals) {
		return ""
	}
	return fmt.Sprintf("needs %q to fail", g.name)
}

func (g failedGate) String() string { return "failed(" + g.name + ")" }

func (g failedGate) describe() string { return fmt.Sprintf("%q failed", g.name) }

// failedNodes returns the nodes that the Failed gates in g name, through And, Or and Not.
func failedNodes(g Gate) []string {
	switch g := g.(type) {
	case failedGate:
		return []string{g.name}
	case andGate:
		return failedOf(g.gates)
	case orGate:
		return failedOf(g.gates)
	case notGate:
		return failedNodes(g.gate)
	}
	return nil
}

func failedOf(gates []Gate) []string {
	var names []string
	for _, g := range gates {
		names = append(names, failedNodes(g)...)
	}
	return names
}

// nodesOf concatenates the Nodes of gates, skipping nil gates.
func nodesOf(gates []Gate) []string {
	var names []string
	for _, g := range gates {
		if g != nil {
			names = append(names, g.Nodes()...)
		}
	}
	return names
}

// joinGates renders gates separated by commas.
func joinGates(gates []Gate) string {
	parts := make([]string, len(gates))
	for i, g := range gates {
		parts[i] = gateString(g)
	}
	return strings.Join(parts, ", ")
}

// describeAll describes gates, each in parentheses, joined by sep.
func describeAll(gates []Gate, sep string) string {
	parts := make([]string, len(gates))
	for i, g := range gates {
		parts[i] = "(" + describe(g) + ")"
	}
	return strings.Join(parts, sep)
}

// checkAll returns the problems of the gates nested in a combinator named op.
func checkAll(op string, gates []Gate) []string {
	var probs []string
	for i, g := range gates {
		if g == nil {
			probs = append(probs, fmt.Sprintf("%s() has a nil gate at position %d", op, i+1))
			continue
		}
		probs = append(probs, checkGate(g)...)
	}
	return probs
}

// quoteAll renders names as a comma-separated list of quoted strings.
func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
