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
			d := ms(cfg.WorkMin)
			if span := cfg.WorkMax - cfg.WorkMin; span > 0 {
				d += ms((n * 37) % span)
			}
			select {
			case <-time.After(d):
				return result{N: n, Replica: cfg.ReplicaID}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
			graph.MaxAttempts(cfg.MaxAttempts), graph.AbandonAfter(ms(cfg.AbandonAfter)),
			graph.Heartbeat(ms(cfg.HBInterval), ms(cfg.HBTimeout)),
			graph.Backoff(func(int) time.Duration { return 0 })),
	})
}

// runWorker is the main of a replica process. It prints "ready" once it serves, a line per
// computation started and finished, and "stopped" after a graceful stop on SIGTERM.
func runWorker(raw string) int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "worker: bad config:", err)
		return 2
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var onFailed func(context.Context, journey.ExecutionEvent) error
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
		OnExecutionFailed: onFailed, NotificationTimeout: time.Minute,
		DatabaseURL: cfg.URL, Schema: cfg.Schema, ReplicaID: cfg.ReplicaID,
		Graphs:     []*graph.Graph{chaosGraph(cfg)},
		MaxWorkers: cfg.MaxWorkers, PollInterval: ms(cfg.Poll), SweepInterval: ms(cfg.Sweep),
		ReplicaHeartbeatInterval: ms(cfg.ReplicaHB), ReplicaStaleAfter: ms(cfg.StaleAfter),
		IdleInTransactionTimeout: ms(cfg.IdleInTx),
		Logger:                   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Test: journey.TestConfig{StoreHooks: storeHooks, Hooks: actors.Hooks{
			ComputationStarted: func(c *persistence.Computation, _, _ *actor.PID) {
				say("started %s %d", c.ExecutionID, c.Attempt)
			},
			ComputationFinished: func(c *persistence.Computation, outcome string) {
				say("finished %s %d %s", c.ExecutionID, c.Attempt, outcome)
			},
		}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	say("ready")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), ms(cfg.StopGrace))
	defer cancel()
	if err := rt.Stop(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker: stop:", err)
		return 1
	}
	say("stopped")
	return 0
}
