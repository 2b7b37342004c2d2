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
//
// # Waiting for the world
//
// A graph waits for a person, an outside system or a time without holding anything while it
// waits: no goroutine, connection or timer. A node whose gate does not hold is not run, and the
// execution stays as rows in PostgreSQL until something changes them. An expense approval, which
// waits for the manager's decision with a deadline, shows the three ways to wait; the program
// examples/approval runs it.
//
// To wait for a person or a system, give the graph an input node, and set it when the answer
// comes: from an HTTP handler or a queue consumer, minutes or weeks later, on any replica. The
// nodes gated on it run then:
//
//	graph.Input("decision"), // "approved" or "rejected"
//
//	// In the handler of the manager's answer:
//	_, err := rt.Set(ctx, id, "decision", "approved")
//
// To wait for a time, use a TickOnce. Its TickFunc returns the time at which the node comes due;
// the runtime stores that time as the tick's value, in Unix milliseconds, and the nodes gated on
// the tick wait until it has passed. A tick between two steps is a durable sleep, here of a day between asking the
// manager and reminding them:
//
//	graph.Compute("ask_manager", graph.Needs("expense"), askManager),
//	graph.TickOnce("reminder_due", graph.Needs("ask_manager"),
//		func(ctx context.Context, in graph.Values) (time.Time, error) {
//			return journey.Now(ctx).Add(24 * time.Hour), nil
//		}),
//	graph.Compute("remind_manager",
//		graph.And(graph.Needs("reminder_due"), graph.Not(graph.Provided("decision"))),
//		remindManager),
//
// The tick's function runs once ask_manager has its value, and again only if that value changes,
// which restarts the sleep. It takes the time from journey.Now(ctx), not time.Now, so that tests
// can move it (see TickFunc). A graph that waits in several places can write that function once,
// in a helper that takes the duration: the after below is one. The zero time means the tick never
// comes due. The Not gate spares the reminder to a manager who has decided.
//
// To wait for whichever comes first, the decision or a deadline, gate a node on Or of the two:
//
//	graph.TickOnce("deadline", graph.Needs("ask_manager"), after(72*time.Hour)),
//	graph.Compute("outcome", graph.Or(graph.Provided("decision"), graph.Provided("deadline")),
//		decide),
//
// The outcome runs as soon as either arrives, and again when the other one does: an Or node
// recomputes as each branch arrives. So decide from the values which came first, not from which
// one woke the node. A function sees every value of the execution, a tick's included before it is
// due, and each value's SetAt is when it was written:
//
//	func decide(ctx context.Context, in graph.Values) (any, error) {
//		decision, deadline := in["decision"], in["deadline"]
//		inTime := !deadline.IsSet() || !decision.SetAt.After(time.UnixMilli(deadline.Int()))
//		if decision.IsSet() && inTime {
//			return decision.String(), nil
//		}
//		return "rejected: no decision in time", nil
//	}
//
// The answer is then the same each time: the second run's result equals the stored value, so it
// writes nothing, and nothing downstream runs again. A decision that comes after the deadline
// changes nothing, nor does a deadline that passes after the decision, whatever order the runtime
// gets to them in.
//
// A crash or a redeploy loses nothing. The due time is stored, as the tick's value and as the
// execution's next wake-up, and the runtime's sweeper, which runs on one replica at a time every
// SweepInterval (5s by default), advances the executions whose ticks have come due: the nodes
// gated on them get their attempts then, which any replica may claim. A tick that came due while
// every replica was down fires at the first sweep after one is back, late by the downtime but not
// lost; a tick function or a step cut short by a crash is abandoned and retried, like any attempt.
// A deadline three days away outlives any number of deploys, to within a SweepInterval.
//
// Package journeytest tests such a graph in a fraction of a second, without sleeping: its clock
// stands still until the test moves it, and journey.Now(ctx) follows it.
//
//	rt := journeytest.New(t, approval)
//	ex, err := rt.Start(t.Context(), approval, journey.WithValues(map[string]any{"expense": claim}))
//	...
//	rt.WaitIdle(ex.ID)         // the ticks have chosen their times
//	rt.Advance(24 * time.Hour) // the reminder comes due, and is sent
//	rt.WaitIdle(ex.ID)
//	rt.Advance(48 * time.Hour) // the deadline passes with no decision
//	rt.RequireValue(ex.ID, "outcome", "rejected: no decision in time")
package graph
