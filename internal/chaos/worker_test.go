//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/actors"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
)

// workerEnv carries a worker's configuration, as JSON, to the re-executed test binary.
const workerEnv = "JOURNEY_CHAOS_WORKER"

func TestMain(m *testing.M) {
	if raw := os.Getenv(workerEnv); raw != "" {
		os.Exit(runWorker(raw))
	}
	pgtest.Main(m)
}

// workerConfig is the configuration of one replica process. Durations are in milliseconds.
type workerConfig struct {
	URL, Schema, ReplicaID string
	ListenURL              string // Config.ListenURL: URL goes through a transaction pooler
	MaxWorkers             int
	StaleAfter, ReplicaHB  int64
	Sweep, Poll            int64
	HBInterval, HBTimeout  int64
	AbandonAfter           int64
	WorkMin, WorkMax       int64
	StopGrace              int64
	IdleInTx               int64
	MaxAttempts            int
	// FreezeInSweep makes the worker SIGSTOP itself the first time its sweeper abandons a
	// computation, inside that transaction, after saying "freezing".
	FreezeInSweep bool
	// BlockingHandler gives the worker an OnExecutionFailed handler that says "handling <key>"
	// and then blocks.
	BlockingHandler bool
	// Stubborn makes the work of the chaos graph ignore its context: it says "began <n> <unix
	// nanoseconds>", takes its time whatever happens, says "returned <n> <unix nanoseconds>", and
	// only then returns the context's error, if any.
	Stubborn bool
	// Soak makes the worker serve the soak graphs as well (see soakKinds), with handlers for both
	// lifecycle events that say "event <key>" and return. BlockingHandler, if set, replaces the
	// failure handler.
	Soak bool
	// Keys, if set, makes the worker Start Keys keys, KeyedCallers times each at once, on SIGUSR1
	// (see keyedStarts).
	Keys, KeyedCallers int
	// Clients, if set, makes the worker serve the load graph too, and run that many clients of
	// it from the start (see clients). ServeLoad serves the load graph without clients.
	Clients   int
	ServeLoad bool
}

// served is the graphs a worker serves: the chaos graph, and the soak graphs if cfg.Soak.
func served(cfg workerConfig) []*graph.Graph {
	gs := []*graph.Graph{chaosGraph(cfg)}
	for _, k := range soakKinds(cfg) {
		gs = append(gs, k.g)
		if k.child != nil {
			gs = append(gs, k.child)
		}
	}
	if cfg.Clients > 0 || cfg.ServeLoad {
		gs = append(gs, loadGraph(cfg))
	}
	return gs
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// result is the value the work node computes: who computed it.
type result struct {
	N       int64  `json:"n"`
	Replica string `json:"replica"`
}

// chaosGraph is the graph every process serves: input n → work, which takes WorkMin to WorkMax.
func chaosGraph(cfg workerConfig) *graph.Graph {
	return graph.MustNew("chaos", "v1", []graph.Node{
		graph.Input("n"),
		graph.Compute("work", graph.Needs("n"), func(ctx context.Context, in graph.Values) (any, error) {
			n := in.Int("n")
			if n < 0 {
				return nil, graph.Permanent(errors.New("negative input"))
			}
			if cfg.Stubborn {
				say("began %d %d", n, time.Now().UnixNano())
				time.Sleep(workTime(cfg, n)) // deaf to ctx, as a slow call that takes no context
				say("returned %d %d", n, time.Now().UnixNano())
				if err := ctx.Err(); err != nil {
					return nil, err
				}
			} else if err := work(ctx, cfg, n); err != nil {
				return nil, err
			}
			return result{N: n, Replica: cfg.ReplicaID}, nil
		}, nodeOptions(cfg)...),
	})
}

// nodeOptions are the options of every node the workers compute: the configured attempts,
// deadline and heartbeat, and retries without backoff.
func nodeOptions(cfg workerConfig) []graph.NodeOption {
	return []graph.NodeOption{
		graph.MaxAttempts(cfg.MaxAttempts), graph.AbandonAfter(ms(cfg.AbandonAfter)),
		graph.Heartbeat(ms(cfg.HBInterval), ms(cfg.HBTimeout)),
		graph.Backoff(func(int) time.Duration { return 0 }),
	}
}

// workTime is WorkMin to WorkMax, the span picked by n.
func workTime(cfg workerConfig, n int64) time.Duration {
	d := ms(cfg.WorkMin)
	if span := cfg.WorkMax - cfg.WorkMin; span > 0 {
		d += ms((max(n, -n) * 37) % span)
	}
	return d
}

// work takes workTime, or until ctx ends.
func work(ctx context.Context, cfg workerConfig, n int64) error {
	select {
	case <-time.After(workTime(cfg, n)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The recurring tick of the soak fires tickCycles times, tickPeriod apart, then pauses.
const (
	tickPeriod = 300 * time.Millisecond // a multiple of 10ms: see nextTick
	tickCycles = 3                      // at most 9: see nextTick
)

// The gated node of the soak: its executions take soakGatedKeys concurrency keys in turn, and at
// most soakGatedParallel run at once. The soak gives it a quarter of its rate, each of WorkMin to
// WorkMax (100 to 400ms): at 300 executions/s, 75 a second, 19 at once on average, and a key
// comes back every 1.3s. The limits hold back its attempts when claims lag by more than that,
// and leave it the capacity of its rate: the soak measures faults under load, not a backlog
// that grows by design.
const (
	soakGatedKeys     = 100
	soakGatedParallel = 100
)

// soakKind is a graph of the soak, with what the soak's audit expects of its executions.
type soakKind struct {
	g *graph.Graph
	// final is the node that the graph's CompletesWhen waits for, and want its value for an
	// input n >= 0.
	final string
	want  func(n int64) int64
	// failsAt is the node that fails for good (graph.Permanent) when n < 0, by design; "" if
	// the graph never fails.
	failsAt string
	// tick is the graph's recurring tick node, "" if none. It succeeds tickCycles+1 times: once
	// per cycle, and once more to return the zero time that pauses it.
	tick string
	// child is the graph of the children that the graph's map node starts, nil if none.
	child *graph.Graph
	// rated is the graph's rate-limited node, "" if none: at most soakRateN claims within any
	// soakRatePer, per rate key.
	rated string
}

// The map of the soak starts 1 to 3 children, each charging its line; the rate-limited node of
// the soak allows soakRateN starts within any soakRatePer per key, of soakRateKeys keys: it
// binds at the rates the soak runs at, so that its windows fill.
const (
	soakRateN    = 10
	soakRatePer  = time.Second
	soakRateKeys = 4
)

// soakLine is the child graph of the soak's map: it charges its line, twice its input i.
func soakLine(cfg workerConfig) *graph.Graph {
	return graph.MustNew("soak-line", "v1", []graph.Node{
		graph.Input("i"),
		graph.Compute("charged", graph.Needs("i"), func(ctx context.Context, in graph.Values) (any, error) {
			if err := work(ctx, cfg, in.Int("i")); err != nil {
				return nil, err
			}
			return 2 * in.Int("i"), nil
		}, nodeOptions(cfg)...),
	}, graph.CompletesWhen(graph.Needs("charged")))
}

// soakLines is how many children the soak's map starts for input n: 1 to 3.
func soakLines(n int64) int64 { return max(n, -n)%3 + 1 }

// soakKinds are the graphs of the soak, nil unless cfg.Soak: a chain, a fan-out and join, a
// node gated by a concurrency key and a parallel limit, and a recurring tick. Every compute
// node takes WorkMin to WorkMax, and computes a value the audit can check from the input n.
func soakKinds(cfg workerConfig) []soakKind {
	if !cfg.Soak {
		return nil
	}
	compute := func(name string, gate graph.Gate, fn func(in graph.Values) (int64, error), opts ...graph.NodeOption) graph.Node {
		return graph.Compute(name, gate, func(ctx context.Context, in graph.Values) (any, error) {
			if err := work(ctx, cfg, in.Int("n")); err != nil {
				return nil, err
			}
			return fn(in)
		}, append(nodeOptions(cfg), opts...)...)
	}
	// failing fails for good when n < 0, and computes f(in) otherwise.
	failing := func(node string, f func(in graph.Values) int64) func(in graph.Values) (int64, error) {
		return func(in graph.Values) (int64, error) {
			if in.Int("n") < 0 {
				return 0, graph.Permanent(fmt.Errorf("%s: negative input, by design", node))
			}
			return f(in), nil
		}
	}
	of := func(f func(in graph.Values) int64) func(in graph.Values) (int64, error) {
		return func(in graph.Values) (int64, error) { return f(in), nil }
	}
	// lastOrPaused holds once the tick's last cycle is due, and stays true once it is paused
	// (the zero time, 0), so that the pause does not clear the final node.
	lastOrPaused := func(v graph.Value) bool {
		return v.IsSet() && (v.Int() == 0 || v.Int()%10 == tickCycles)
	}
	line := soakLine(cfg)
	return []soakKind{{
		g: graph.MustNew("soak-chain", "v1", []graph.Node{
			graph.Input("n"),
			compute("a", graph.Needs("n"), of(func(in graph.Values) int64 { return in.Int("n") + 1 })),
			compute("b", graph.Needs("a"), failing("b", func(in graph.Values) int64 { return 2 * in.Int("a") })),
			compute("c", graph.Needs("b"), of(func(in graph.Values) int64 { return in.Int("b") + 3 })),
		}, graph.CompletesWhen(graph.Needs("c"))),
		final: "c", want: func(n int64) int64 { return 2*(n+1) + 3 }, failsAt: "b",
	}, {
		g: graph.MustNew("soak-fanout", "v1", []graph.Node{
			graph.Input("n"),
			compute("f1", graph.Needs("n"), of(func(in graph.Values) int64 { return in.Int("n") })),
			compute("f2", graph.Needs("n"), failing("f2", func(in graph.Values) int64 { return 2 * in.Int("n") })),
			compute("f3", graph.Needs("n"), of(func(in graph.Values) int64 { return 3 * in.Int("n") })),
			compute("join", graph.Needs("f1", "f2", "f3"), of(func(in graph.Values) int64 {
				return in.Int("f1") + in.Int("f2") + in.Int("f3")
			})),
		}, graph.CompletesWhen(graph.Needs("join"))),
		final: "join", want: func(n int64) int64 { return 6 * n }, failsAt: "f2",
	}, {
		g: graph.MustNew("soak-gated", "v1", []graph.Node{
			graph.Input("n"),
			compute("gated", graph.Needs("n"), failing("gated", func(in graph.Values) int64 { return in.Int("n") * in.Int("n") }),
				graph.ConcurrencyKey(func(in graph.Values) string {
					// The soak gives this graph one execution in four: their inputs are 4 apart.
					n := in.Int("n")
					return fmt.Sprintf("k%d", (max(n, -n)/4)%soakGatedKeys)
				}),
				graph.MaxParallel(soakGatedParallel)),
		}, graph.CompletesWhen(graph.Needs("gated"))),
		final: "gated", want: func(n int64) int64 { return n * n }, failsAt: "gated",
	}, {
		g: graph.MustNew("soak-tick", "v1", []graph.Node{
			graph.Input("n"),
			graph.TickRecurring("tick", graph.Needs("n"), nextTick, nodeOptions(cfg)...),
			compute("final", graph.When("tick", lastOrPaused), of(func(graph.Values) int64 { return tickCycles })),
		}, graph.CompletesWhen(graph.Needs("final"))),
		final: "final", want: func(int64) int64 { return tickCycles }, tick: "tick",
	}, {
		g: graph.MustNew("soak-map", "v1", []graph.Node{
			graph.Input("n"),
			graph.Map("lines", graph.Needs("n"), line, func(in graph.Values) ([]map[string]any, error) {
				items := make([]map[string]any, soakLines(in.Int("n")))
				for i := range items {
					items[i] = map[string]any{"i": i + 1}
				}
				return items, nil
			}, append(nodeOptions(cfg), graph.Result("charged"))...),
			compute("total", graph.Needs("lines"), of(func(in graph.Values) int64 {
				var charged []int64
				_ = json.Unmarshal(in["lines"].Raw, &charged)
				var sum int64
				for _, c := range charged {
					sum += c
				}
				return sum
			})),
		}, graph.CompletesWhen(graph.Needs("total"))),
		final: "total", want: func(n int64) int64 { k := soakLines(n); return k * (k + 1) }, child: line,
	}, {
		g: graph.MustNew("soak-rated", "v1", []graph.Node{
			graph.Input("n"),
			compute("call", graph.Needs("n"), of(func(in graph.Values) int64 { return in.Int("n") + 7 }),
				graph.RateLimit(soakRateN, soakRatePer, graph.RateKey(func(in graph.Values) string {
					n := in.Int("n")
					return fmt.Sprintf("r%d", max(n, -n)%soakRateKeys)
				}))),
		}, graph.CompletesWhen(graph.Needs("call"))),
		final: "call", want: func(n int64) int64 { return n + 7 }, rated: "call",
	}}
}

// nextTick fires tickCycles cycles, tickPeriod apart, then pauses. The cycle number rides in the
// last decimal digit of the due time in milliseconds (cycle 1 ends in 1, and so on), so the
// count follows from the tick's own previous value alone, whichever replica computes it and
// however often an attempt is retried.
func nextTick(_ context.Context, in graph.Values) (time.Time, error) {
	prev := in.Int("tick")
	switch {
	case prev == 0: // the first call
		due := time.Now().Add(tickPeriod).UnixMilli()
		return time.UnixMilli(due - due%10 + 1), nil
	case prev%10 < tickCycles:
		return time.UnixMilli(prev + tickPeriod.Milliseconds() + 1), nil
	default:
		return time.Time{}, nil
	}
}

// sayMu keeps the lines of a worker whole.
var sayMu sync.Mutex

// say prints a line of a worker's output, which the test reads.
func say(format string, args ...any) {
	sayMu.Lock()
	defer sayMu.Unlock()
	fmt.Printf(format+"\n", args...)
}

// runWorker is the main of a replica process. It prints "ready" once it serves, a line per
// computation started and finished, a line per event its handlers receive, and "stopped" after
// a graceful stop on SIGTERM.
func runWorker(raw string) int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "worker: bad config:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	startKeyed := keyedStarts(cfg)
	var onFailed, onCompleted, onCanceled func(context.Context, journey.ExecutionEvent) error
	if cfg.Soak {
		onFailed = func(_ context.Context, e journey.ExecutionEvent) error {
			say("event %s", e.IdempotencyKey)
			return nil
		}
		onCompleted, onCanceled = onFailed, onFailed
	}
	if cfg.BlockingHandler {
		onFailed = func(ctx context.Context, e journey.ExecutionEvent) error {
			say("handling %s", e.IdempotencyKey)
			<-ctx.Done()
			return ctx.Err()
		}
	}
	var freeze sync.Once
	storeHooks := persistence.Hooks{}
	if cfg.FreezeInSweep {
		storeHooks.Abandoning = func(c *persistence.Computation) {
			freeze.Do(func() {
				say("freezing %s", c.ExecutionID)
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			})
		}
	}
	rt, err := journey.New(ctx, journey.Config{
		OnExecutionFailed: onFailed, OnExecutionCompleted: onCompleted, OnExecutionCanceled: onCanceled, NotificationTimeout: time.Minute,
		DatabaseURL: cfg.URL, ListenURL: cfg.ListenURL, Schema: cfg.Schema, ReplicaID: cfg.ReplicaID,
		Graphs:     served(cfg),
		MaxWorkers: cfg.MaxWorkers, PollInterval: ms(cfg.Poll), SweepInterval: ms(cfg.Sweep),
		ReplicaHeartbeatInterval: ms(cfg.ReplicaHB), ReplicaStaleAfter: ms(cfg.StaleAfter),
		IdleInTransactionTimeout: ms(cfg.IdleInTx),
		Logger:                   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Test: journey.TestConfig{StoreHooks: storeHooks, Hooks: actors.Hooks{
			ComputationStarted: func(c *persistence.Computation, _, _ *actor.PID) {
				say("started %s %d %s", c.ExecutionID, c.Attempt, c.Node)
			},
			ComputationFinished: func(c *persistence.Computation, outcome string) {
				say("finished %s %d %s %s", c.ExecutionID, c.Attempt, c.Node, outcome)
			},
		}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	say("ready")
	waitClients := clients(ctx, rt, cfg)
	startKeyed(ctx, rt)
	<-ctx.Done()
	waitClients()
	sctx, cancel := context.WithTimeout(context.Background(), ms(cfg.StopGrace))
	defer cancel()
	if err := rt.Stop(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker: stop:", err)
		return 1
	}
	say("stopped")
	return 0
}
