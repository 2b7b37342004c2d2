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

// overlap tracks how many calls of a function run at once, per group. The first calls of a group
// with a rendezvous wait for each other until that many run together: a test asserts that the
// runtime lets them, instead of hoping that they happened to overlap.
type overlap struct {
	mu      sync.Mutex
	running map[string]int
	max     map[string]int
	want    map[string]int           // the rendezvous: how many calls of the group must meet
	met     map[string]chan struct{} // closed once they met, or once the first of them gave up
	missed  map[string]bool          // the first of them gave up
}

// rendezvousPatience is how long the first calls of a group wait for each other.
const rendezvousPatience = 30 * time.Second

func newOverlap(want map[string]int) *overlap {
	o := &overlap{running: map[string]int{}, max: map[string]int{}, want: want,
		met: map[string]chan struct{}{}, missed: map[string]bool{}}
	for group := range want {
		o.met[group] = make(chan struct{})
	}
	return o
}

// hold runs as one of group's calls: it waits for the group's rendezvous, if it has one, then runs
// for d more. d is about wall-clock overlap: calls beyond a limit would be seen running together.
func (o *overlap) hold(ctx context.Context, group string, d time.Duration) error {
	o.mu.Lock()
	o.running[group]++
	o.max[group] = max(o.max[group], o.running[group])
	met := o.met[group]
	if met != nil && o.running[group] >= o.want[group] {
		closeOnce(met)
	}
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.running[group]--
		o.mu.Unlock()
	}()
	if met != nil {
		select {
		case <-met:
		case <-time.After(rendezvousPatience):
			o.mu.Lock()
			select {
			case <-met:
			default:
				o.missed[group] = true
				close(met)
			}
			o.mu.Unlock()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (o *overlap) maxOf(group string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.max[group]
}

// requireMet fails unless the group's rendezvous was met.
func (o *overlap) requireMet(t *testing.T, group, what string) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	require.False(t, o.missed[group], "%s: only %d of %d calls ran at once within %v", what, o.max[group], o.want[group], rendezvousPatience)
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
	o := newOverlap(map[string]int{"distinct": 2})
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

	runAll(t, g, []*journey.Runtime{a, b}, 30, func(i int) string {
		if i%2 == 0 {
			return "db-1"
		}
		return fmt.Sprintf("db-%d", 100+i)
	})
	require.Equal(t, 1, o.maxOf("db-1"), "the shared key never has two computations running at once")
	o.requireMet(t, "distinct", "distinct keys run in parallel")
	t.Logf("most running at once: db-1 %d, distinct keys %d", o.maxOf("db-1"), o.maxOf("distinct"))
}

func TestMaxParallelAcrossReplicas(t *testing.T) {
	t.Parallel()
	o := newOverlap(map[string]int{"all": 3})
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
	runAll(t, g, rts, 30, func(i int) string { return fmt.Sprint(i) })
	require.LessOrEqual(t, o.maxOf("all"), 3, "never more than 3 running at once")
	o.requireMet(t, "all", "the limit can be used")
}
