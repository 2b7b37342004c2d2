package graph

import "fmt"

// Kind says what a node is and how the runtime treats it.
type Kind int

// The node kinds. The zero Kind is not valid, so a zero Node is caught by New.
const (
	// KindInput is a node whose value is set from outside the graph.
	KindInput Kind = iota + 1
	// KindCompute is a node whose value is computed by a ComputeFunc once its gate holds.
	KindCompute
	// KindMutate is a node whose ComputeFunc result is written into its target input nodes.
	KindMutate
	// KindTickOnce is a node whose TickFunc returns the one time at which it becomes due.
	KindTickOnce
	// KindTickRecurring is a node whose TickFunc is called again after each due time.
	KindTickRecurring
	// KindHistorian is a node that keeps a newest-first list of the changes of the nodes its
	// gate names.
	KindHistorian
	// KindArchive is a node that archives the execution once its gate holds.
	KindArchive
	// KindMap is a node that starts an execution of a child graph for each item of a list, and
	// whose value is the list of their results (Map), or the result of one (Child).
	KindMap
)

var kindNames = map[Kind]string{
	KindInput:         "input",
	KindCompute:       "compute",
	KindMutate:        "mutate",
	KindTickOnce:      "tick_once",
	KindTickRecurring: "tick_recurring",
	KindHistorian:     "historian",
	KindArchive:       "archive",
	KindMap:           "map",
}

// String returns the snake_case name of the kind, such as "tick_once", or "Kind(n)" for a value
// that is not one of the declared kinds.
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// valid reports whether k is one of the declared kinds.
func (k Kind) valid() bool {
	_, ok := kindNames[k]
	return ok
}

// isTick reports whether k is one of the tick kinds.
func (k Kind) isTick() bool {
	return k == KindTickOnce || k == KindTickRecurring
}

// runs reports whether nodes of kind k run a function, and so can fail.
func (k Kind) runs() bool {
	return k == KindCompute || k == KindMutate || k.isTick() || k == KindMap
}
