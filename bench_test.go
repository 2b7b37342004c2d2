package journey_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// benchWorkers is the number of goroutines that start executions and set their inputs.
const benchWorkers = 32

// BenchmarkOneCompute runs b.N executions of a one-compute graph (x → y = x+1) through one
// replica. The executions are started before the timer; then benchWorkers goroutines each set x
// on an execution and wait for y with WaitAny, and so on. Each latency runs from just before Set
// to Get returning y: the write, the NOTIFY, the claim, the computation, its fenced completion
// and the wakeup of the waiting Get.
//
//	make bench
//	go test -run '^$' -bench BenchmarkOneCompute -benchtime 500x .
func BenchmarkOneCompute(b *testing.B) {
	g := graph.MustNew("bench", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.Int("x") + 1, nil
		}),
	})
	cfg := testConfig(b, g)
	cfg.MaxWorkers = 100
	rt := newRuntime(b, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	ids := make([]string, b.N)
	starts, sctx := errgroup.WithContext(ctx)
	starts.SetLimit(benchWorkers)
	for i := range ids {
		starts.Go(func() error {
			ex, err := rt.Start(sctx, g)
			if err != nil {
				return err
			}
			ids[i] = ex.ID
			return nil
		})
	}
	require.NoError(b, starts.Wait())

	latencies := make([]time.Duration, b.N)
	b.ResetTimer()
	began := time.Now()
	runs, rctx := errgroup.WithContext(ctx)
	runs.SetLimit(benchWorkers)
	for i, id := range ids {
		runs.Go(func() error {
			t0 := time.Now()
			if _, err := rt.Set(rctx, id, "x", i); err != nil {
				return fmt.Errorf("setting x of %s: %w", id, err)
			}
			v, err := rt.Get(rctx, id, "y", journey.WaitAny())
			if err != nil {
				return fmt.Errorf("waiting for y of %s: %w", id, err)
			}
			d := time.Since(t0)
			if got := v.Int(); got != int64(i)+1 {
				return fmt.Errorf("y of %s is %d, want %d", id, got, i+1)
			}
			latencies[i] = d // each goroutine writes its own slot; Wait publishes them
			return nil
		})
	}
	require.NoError(b, runs.Wait())
	elapsed := time.Since(began)
	b.StopTimer()

	slices.Sort(latencies)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "computations/s")
	b.ReportMetric(percentile(latencies, 0.50).Seconds()*1000, "p50_ms")
	b.ReportMetric(percentile(latencies, 0.99).Seconds()*1000, "p99_ms")
}

// percentile returns the p-th percentile (0 < p ≤ 1) of sorted durations, by the nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// BenchmarkStartMany starts 1000 executions of the x → y graph per op, with x set, in two ways:
// one StartMany call, and 1000 Start+SetMany calls from one goroutine. The replica computes y
// meanwhile, as it would in production; with more than one op, each op after the first also
// competes with the draining of the ops before it.
//
//	go test -run '^$' -bench BenchmarkStartMany -benchtime 1x -count 3 .
func BenchmarkStartMany(b *testing.B) {
	const n = 1000
	g := graph.MustNew("bench", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.Int("x") + 1, nil
		}),
	})
	inputs := numbered(n)
	for _, tc := range []struct {
		name  string
		start func(ctx context.Context, rt *journey.Runtime) error
	}{
		{"StartMany", func(ctx context.Context, rt *journey.Runtime) error {
			_, err := rt.StartMany(ctx, g, inputs)
			return err
		}},
		{"Start+SetMany", func(ctx context.Context, rt *journey.Runtime) error {
			for _, values := range inputs {
				ex, err := rt.Start(ctx, g)
				if err != nil {
					return err
				}
				if _, err := rt.SetMany(ctx, ex.ID, values); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rt := newRuntime(b, testConfig(b, g))
			ctx := testCtx(b)
			b.ResetTimer()
			for range b.N {
				require.NoError(b, tc.start(ctx, rt))
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "executions/s")
		})
	}
}
