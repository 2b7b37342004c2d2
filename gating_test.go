package journey_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// overlap tracks how many calls of a function run at once, per group.
type overlap struct {
	mu      sync.Mutex
	running map[string]int
	max     map[string]int
}

func newOverlap() *overlap { return &overlap{running: map[string]int{}, max: map[string]int{}} }

// hold runs for d as one of group's calls. The test is about wall-clock overlap.
func (o *overlap) hold(ctx context.Context, group string, d time.Duration) error {
	o.mu.Lock()
	o.running[group]++
	o.max[group] = max(o.max[group], o.running[group])
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.running[group]--
		o.mu.Unlock()
	}()
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (o *overlap) maxOf(group string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.max[group]
}

// runAll starts n executions spread over the runtimes, sets "k" with key(i) in all of them at
// once, and waits for "job".
func runAll(t *testing.T, g *graph.Graph, rts []*journey.Runtime, n int, key func(i int) string) {
	t.Helper()
	ctx := testCtx(t)
	ids := make([]string, n)
	for i := range n {
		ex, err := rts[i%len(rts)].Start(ctx, g)
		require.NoError(t, err)
		ids[i] = ex.ID
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := rts[i%len(rts)].Set(ctx, id, "k", key(i))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i, id := range ids {
		_, err := rts[(i+1)%len(rts)].Get(ctx, id, "job", journey.WaitAny())
		require.NoError(t, err)
	}
}

func TestConcurrencyKeyAcrossReplicas(t *testing.T) {
	t.Parallel()
	o := newOverlap()
	g := graph.MustNew("keyed", "v1", []graph.Node{
		graph.Input("k"),
		graph.Compute("job", graph.Needs("k"), func(ctx context.Context, in graph.Values) (any, error) {
			group := "distinct"
			if in.String("k") == "db-1" {
				group = "db-1"
			}
			return "ok", o.hold(ctx, group, 50*time.Millisecond)
		}, graph.ConcurrencyKey(func(in graph.Values) string { return in.String("k") })),
	})
	cfg := testConfig(t, g)
	a := newRuntime(t, cfg)
	cfg.ReplicaID = "second"
	b := newRuntime(t, cfg)

	runAll(t, g, []*journey.Runtime{a, b}, 40, func(i int) string {
		if i%2 == 0 {
			return "db-1"
		}
		return fmt.Sprintf("db-%d", 100+i)
	})
	require.Equal(t, 1, o.maxOf("db-1"), "the shared key never has two computations running at once")
	require.Greater(t, o.maxOf("distinct"), 1, "distinct keys run in parallel")
	t.Logf("most running at once: db-1 %d, distinct keys %d", o.maxOf("db-1"), o.maxOf("distinct"))
}

func TestMaxParallelAcrossReplicas(t *testing.T) {
	t.Parallel()
	o := newOverlap()
	g := graph.MustNew("limited", "v1", []graph.Node{
		graph.Input("k"),
		graph.Compute("job", graph.Needs("k"), func(ctx context.Context, in graph.Values) (any, error) {
			return "ok", o.hold(ctx, "all", 30*time.Millisecond)
		}, graph.MaxParallel(3)),
	})
	cfg := testConfig(t, g)
	var rts []*journey.Runtime
	for i := range 3 {
		cfg.ReplicaID = fmt.Sprintf("r%d", i)
		rts = append(rts, newRuntime(t, cfg))
	}
	runAll(t, g, rts, 60, func(i int) string { return fmt.Sprint(i) })
	require.LessOrEqual(t, o.maxOf("all"), 3, "never more than 3 running at once")
	require.Equal(t, 3, o.maxOf("all"), "the limit is used")
}
