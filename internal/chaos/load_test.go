//go:build linux

package chaos

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// loadGraph is the graph of a worker's clients (see clients): two inputs, then two compute nodes
// in a chain, each quick.
func loadGraph(cfg workerConfig) *graph.Graph {
	return graph.MustNew("load", "v1", []graph.Node{
		graph.Input("a"),
		graph.Input("b"),
		graph.Compute("sum", graph.Needs("a", "b"), func(_ context.Context, in graph.Values) (any, error) {
			return in.Int("a") + in.Int("b"), nil
		}, nodeOptions(cfg)...),
		graph.Compute("double", graph.Needs("sum"), func(_ context.Context, in graph.Values) (any, error) {
			return 2 * in.Int("sum"), nil
		}, nodeOptions(cfg)...),
	})
}

// loadRound bounds one round of a client.
const loadRound = 30 * time.Second

// clients, for a worker with Clients, runs that many clients until ctx ends, and returns a
// function that waits for them. Each client, round after round, starts an execution of the load
// graph with a key of its own (with a set, in one round of two), sets b (and a), waits for double,
// checks it, and says "load ok <id>", or "load error <what>: <error>" if any step failed. A round
// that ctx ends says nothing.
func clients(ctx context.Context, rt *journey.Runtime, cfg workerConfig) (wait func()) {
	var wg sync.WaitGroup
	g := loadGraph(cfg)
	for c := range cfg.Clients {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				id, err := loadRoundOf(ctx, rt, g, fmt.Sprintf("%s/%d/%d", cfg.ReplicaID, c, i), int64(i))
				switch {
				case ctx.Err() != nil:
				case err != nil:
					say("load error %v", err)
				default:
					say("load ok %s", id)
				}
			}
		})
	}
	return wg.Wait
}

// loadRoundOf is one round of a client (see clients), whose execution has key and a = n, b = n+1.
func loadRoundOf(ctx context.Context, rt *journey.Runtime, g *graph.Graph, key string, n int64) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, loadRound)
	defer cancel()
	var values map[string]any
	if n%2 == 0 {
		values = map[string]any{"a": n}
	}
	ex, err := rt.Start(ctx, g, journey.WithKey(key), journey.WithValues(values))
	if err != nil {
		return "", fmt.Errorf("start %s: %w", key, err)
	}
	set := map[string]any{"b": n + 1}
	if values == nil {
		set["a"] = n
	}
	if _, err := rt.SetMany(ctx, ex.ID, set); err != nil {
		return "", fmt.Errorf("set %s: %w", ex.ID, err)
	}
	v, err := rt.Get(ctx, ex.ID, "double", journey.WaitAny())
	if err != nil {
		return "", fmt.Errorf("get %s: %w", ex.ID, err)
	}
	if want := 2 * (2*n + 1); v.Int() != want {
		return "", fmt.Errorf("get %s: double is %d, not %d", ex.ID, v.Int(), want)
	}
	return ex.ID, nil
}
