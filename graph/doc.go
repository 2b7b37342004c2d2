// Package graph is the language in which journey graphs are defined: nodes, the gates that
// decide when they run, their options, and the values they read and write. It is pure Go and
// imports nothing else from this module, nor any database; the runtime in package journey
// executes the graphs defined here.
//
// # Defining a graph
//
// A graph has a name, a version and a list of nodes. Input nodes are set from outside; the
// other nodes run once their gate holds:
//
//	g, err := graph.New("onboarding", "v1", []graph.Node{
//		graph.Input("name"),
//		graph.Input("email"),
//		graph.Compute("greeting", graph.Needs("name", "email"),
//			func(ctx context.Context, in graph.Values) (any, error) {
//				return "Welcome, " + in.String("name") + " at " + in.String("email"), nil
//			},
//			graph.MaxAttempts(3), graph.AbandonAfter(time.Minute)),
//	})
//
// New checks the whole graph and reports every problem at once, each naming its node: unknown
// or duplicate names, names that are not 1 to 255 bytes of UTF-8 without control characters,
// cycles, options out of range or on the wrong kind of node, and more. The error matches
// ErrInvalidGraph. MustNew panics instead, for graphs in package variables.
// ExampleNew and ExampleNew_invalid show both, with their output.
//
// # Node kinds
//
//   - Input: set by the application.
//   - Compute: a ComputeFunc computes the value from the execution's values. It recomputes when
//     an upstream value changes, and its value is cleared when its gate stops holding.
//   - Mutate: the ComputeFunc result is written into target input nodes.
//   - TickOnce and TickRecurring: a TickFunc returns when the node becomes due; nodes gated on
//     it wait until then.
//   - Historian: keeps a newest-first list of the changes of the nodes its gate names.
//   - Archive: archives the execution.
//
// # Gates
//
// A gate says when a node may run. Needs("a", "b") holds when both are provided; Needs() holds
// at once. Gates nest with And, Or and Not, and look at values with Provided, IsTrue, IsFalse
// and When:
//
//	graph.And(
//		graph.Needs("email"),
//		graph.Or(graph.IsTrue("subscribed"), graph.When("age", func(v graph.Value) bool {
//			return v.Int() >= 18
//		})),
//		graph.Not(graph.Provided("unsubscribed")),
//	)
//
// Gate.Unmet explains, in words, what a gate still waits for.
//
// # Values
//
// Values are stored as JSON. A ComputeFunc reads them through Values, with accessors such as
// String, Int and Bool that return the zero value when a node is not set, or Decode for any
// type. Its own result must be JSON-encodable. A returned error is retried, up to MaxAttempts
// per upstream change with Backoff between attempts; wrap it with Permanent to fail at once.
package graph
