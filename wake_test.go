package journey_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// unpolled bounds what these tests wait for a value that no poll brings: far below their 30s
// PollInterval, with room for a busy two-core machine under -race.
const unpolled = 5 * time.Second

// fanoutGraph is x → f0 … f(n-1), each f_i = x + i.
func fanoutGraph(n int) *graph.Graph {
	nodes := []graph.Node{graph.Input("x")}
	for i := range n {
		nodes = append(nodes, graph.Compute(fmt.Sprintf("f%d", i), graph.Needs("x"),
			func(ctx context.Context, in graph.Values) (any, error) { return in.Int("x") + int64(i), nil }))
	}
	return graph.MustNew("fanout", "v1", nodes)
}

// Ready work never waits for the poll while the replica has a free worker: with fewer workers
// than siblings, the claims that run while a sibling's outcome is recorded skip the others, whose
// execution row the completer holds, and the completion that releases it wakes the dispatcher.
// Each waiting Get is answered by the write of its value, not by its poll.
func TestFanoutWiderThanTheWorkersDoesNotWaitForThePoll(t *testing.T) {
	t.Parallel()
	const width = 10
	g := fanoutGraph(width)
	cfg := testConfig(t, g)
	cfg.MaxWorkers = 4
	cfg.PollInterval = 30 * time.Second
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)

	for round := range 3 {
		began := time.Now()
		ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 100 * round}))
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, unpolled)
		got := make(chan error, width)
		for i := range width {
			go func() {
				v, err := rt.Get(wctx, ex.ID, fmt.Sprintf("f%d", i), journey.WaitAny())
				if err == nil && v.Int() != int64(100*round+i) {
					err = fmt.Errorf("f%d is %d", i, v.Int())
				}
				got <- err
			}()
		}
		for range width {
			require.NoError(t, <-got, "round %d", round)
		}
		cancel()
		t.Logf("round %d: %d siblings on 4 workers in %s", round, width, time.Since(began))
	}
}
