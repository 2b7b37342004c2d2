// Package journey runs durable computation graphs on PostgreSQL. A graph, defined with package
// graph, has input nodes that the application sets and compute nodes that run once their gate
// holds. Every value is persisted as it is set or computed, and computations run on any replica
// and survive crashes and redeploys.
//
// # Define a graph
//
//	var onboarding = graph.MustNew("onboarding", "v1", []graph.Node{
//		graph.Input("name"),
//		graph.Input("email"),
//		graph.Compute("greeting", graph.Needs("name", "email"),
//			func(ctx context.Context, in graph.Values) (any, error) {
//				return "Welcome, " + in.String("name") + " at " + in.String("email"), nil
//			}),
//	})
//
// # Run it
//
// New connects, migrates the schema and starts this replica. Stop it when the program ends:
//
//	rt, err := journey.New(ctx, journey.Config{
//		DatabaseURL: os.Getenv("DATABASE_URL"),
//		Graphs:      []*graph.Graph{onboarding},
//	})
//	if err != nil {
//		return err
//	}
//	defer rt.Stop(context.Background())
//
// Start an execution, set its inputs, and read the computed value. Each change gets the next
// revision of the execution; Get with WaitAny waits, woken by the database, until the value is
// there:
//
//	ex, err := rt.Start(ctx, onboarding)
//	rev, err := rt.Set(ctx, ex.ID, "name", "Mario")
//	rev, err = rt.Set(ctx, ex.ID, "email", "mario@example.com")
//	greeting, err := journey.GetAs[string](ctx, rt, ex.ID, "greeting", journey.WaitAny())
//
// ExampleRuntime is this program whole, with its errors handled, and the output it prints.
//
// Start can set inputs itself, as one change (revision 1), and StartMany starts many executions
// in one transaction, for bulk:
//
//	ex, err = rt.Start(ctx, onboarding, journey.WithValues(map[string]any{"name": "Mario", "email": "mario@example.com"}))
//	execs, err := rt.StartMany(ctx, onboarding, []map[string]any{{"name": "Luigi"}, {"name": "Peach"}})
//
// A Start given a key starts nothing if an unarchived execution of the graph holds the key, and
// returns that one, with Existing set: a retried request, a webhook delivered twice or two
// replicas reacting to one event make one execution. A graph.Singleton graph has at most one:
//
//	ex, err = rt.Start(ctx, onboarding, journey.WithKey("signup-1042"))
//	ex, err = rt.FindByKey(ctx, "onboarding", "signup-1042")
//
// Values, History, Computations and Summarize show what an execution holds, how it changed, what
// ran, and what each pending node waits for; List and Count find executions by their values.
// Errors match the sentinels with errors.Is: ErrNotFound, ErrNotSet, ErrComputationFailed and
// the others.
//
// # Replicas
//
// Any number of processes may run a Runtime on the same database and schema. Each is a replica:
// it claims available computations of the graphs in its Config.Graphs, up to MaxWorkers at a
// time. Any replica can read any execution; writing one (Set, Retry, ...) needs a replica that
// serves its graph, since writes advance the graph. Stop is graceful: running computations
// finish until its context ends; then their contexts are canceled, and each attempt whose
// function returns is released for another replica to take over without losing an attempt. One
// whose function ignores its context is taken over once its heartbeat deadline passes, never
// while it still runs here.
//
// # Heartbeats and deadlines
//
// While a computation runs, a watchdog extends its heartbeat deadline every heartbeat interval
// (graph.Heartbeat, default 10s with a 30s timeout). Its hard deadline is graph.AbandonAfter
// (default 60s). Both are computed with the database's now(), so clock skew between replicas
// cannot abandon live work.
//
// # The sweeper
//
// Every SweepInterval (default 5s) one replica at a time sweeps: it abandons running
// computations past either deadline, or held by a replica whose heartbeat is older than
// ReplicaStaleAfter, with an audit reason, and retries them with backoff up to
// graph.MaxAttempts (default 3), or fails the node; it also promotes retries that are due, and
// advances executions whose ticks came due.
//
// # Gating
//
// A computation with a graph.ConcurrencyKey or a graph.MaxParallel limit waits PENDING until it
// fits; the promotion to AVAILABLE is serialised across replicas, so a key never has two holders
// and a limit is never exceeded. Other work is available at once.
//
// # Notifications
//
// Config.OnExecutionFailed, Config.OnExecutionCompleted, Config.OnExecutionCanceled and
// Config.Webhooks receive lifecycle events, claimed exactly once across replicas and delivered at
// least once, with an idempotency key that is the same at every delivery. A delivery that fails
// is retried with backoff for Config.NotificationRetryHorizon (72 hours by default).
// VerifyWebhook checks a webhook's signature. A handler may run before New returns: it gets the
// runtime as the event's Runtime field.
//
// # Failure, cancel
//
// A failure is handled in the graph: a compensation node gated on graph.Failed(node) runs once
// the node has failed for good, with retries and history like any node (examples/order-fulfilment
// gives the stock back so). Runtime.Cancel stops an execution for good, whichever replicas run
// its attempts; Runtime.Archive puts it away.
//
// # Testing
//
// Package journeytest runs a graph in a test: a Runtime per test on a fresh schema, with a clock
// that the test moves, so that an hour's tick or a retry's backoff takes no wall time. The
// functions of a graph read that clock with Now(ctx), which is time.Now() in production.
//
// # Fencing
//
// Each claim gets a fresh claim token. A computation's heartbeats, its completion and its value
// write match only the row still running under its replica and token, so a computation that
// lost its claim (abandoned, then retried elsewhere) can never write: its result is dropped and
// its context cancelled.
package journey
