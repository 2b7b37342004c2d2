package journey_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// observed collects reader's metrics once.
func observed(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// has reports whether set holds every attribute of want.
func has(set attribute.Set, want ...attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

// sumOf sums the points of a counter whose attributes hold want.
func sumOf(t *testing.T, data metricdata.Aggregation, want ...attribute.KeyValue) int64 {
	t.Helper()
	sum, ok := data.(metricdata.Sum[int64])
	require.True(t, ok, "a counter, got %T", data)
	var n int64
	for _, p := range sum.DataPoints {
		if has(p.Attributes, want...) {
			n += p.Value
		}
	}
	return n
}

// spansNamed returns the ended spans called name.
func spansNamed(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// TestTelemetryOfARetry runs an execution whose compute node fails once, then succeeds, and
// reads the metrics and spans it made.
func TestTelemetryOfARetry(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	release := make(chan struct{})
	var completed atomic.Int64
	g := graph.MustNew("otel_retry", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			if calls.Add(1) == 1 {
				return nil, errors.New("first try fails")
			}
			<-release // held RUNNING until the test has sampled it
			return in.Int("x") + 1, nil
		}, graph.Backoff(fastBackoff)),
	}, graph.CompletesWhen(graph.Provided("y")))
	reader := sdkmetric.NewManualReader()
	rec := tracetest.NewSpanRecorder()
	cfg := testConfig(t, g)
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	cfg.ReplicaID = "otel-retry"
	cfg.OnExecutionCompleted = func(context.Context, journey.ExecutionEvent) error {
		completed.Add(1)
		return nil
	}
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)

	// The second attempt runs, and the sweeping replica samples it RUNNING.
	node := []attribute.KeyValue{attribute.String("journey.graph", "otel_retry"), attribute.String("journey.node", "y")}
	waitFor(t, "y RUNNING in journey.computation.count", func() bool {
		data, ok := observed(t, reader)["journey.computation.count"]
		if !ok {
			return false
		}
		for _, p := range data.(metricdata.Gauge[int64]).DataPoints {
			if has(p.Attributes, append(node, attribute.String("journey.state", "RUNNING"))...) && p.Value == 1 {
				return true
			}
		}
		return false
	})
	close(release)
	v, err := rt.Get(ctx, ex.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, int64(2), v.Int())
	waitFor(t, "the completion's delivery", func() bool { return completed.Load() == 1 })

	// The attempt's span ends once its metrics are recorded.
	waitFor(t, "both attempt spans to end", func() bool { return len(spansNamed(rec, "journey.attempt")) == 2 })
	var got map[string]metricdata.Aggregation
	waitFor(t, "the delivery to be counted", func() bool {
		got = observed(t, reader)
		d, ok := got["journey.notification.deliveries"]
		return ok && sumOf(t, d, attribute.String("journey.event", "execution.completed"),
			attribute.String("journey.target", "handler"), attribute.String("journey.outcome", "delivered")) == 1
	})
	finished := got["journey.computation.finished"]
	require.Equal(t, int64(1), sumOf(t, finished, append(node, attribute.String("journey.outcome", "failed"))...))
	require.Equal(t, int64(1), sumOf(t, finished, append(node, attribute.String("journey.outcome", "succeeded"))...))
	require.Equal(t, int64(2), sumOf(t, finished), "nothing else finished")

	histogram := func(name string) metricdata.HistogramDataPoint[float64] {
		t.Helper()
		h, ok := got[name].(metricdata.Histogram[float64])
		require.True(t, ok, "%s is a histogram", name)
		var all metricdata.HistogramDataPoint[float64]
		for _, p := range h.DataPoints {
			all.Count += p.Count
			all.Sum += p.Sum
		}
		return all
	}
	require.Equal(t, uint64(2), histogram("journey.computation.duration").Count, "two attempts ran")
	require.Equal(t, uint64(2), histogram("journey.computation.claim_wait").Count, "two attempts were claimed")
	batches, ok := got["journey.completer.batch.size"].(metricdata.Histogram[int64])
	require.True(t, ok)
	var outcomes int64
	for _, p := range batches.DataPoints {
		outcomes += p.Sum
	}
	require.Equal(t, int64(2), outcomes, "the completer recorded two outcomes")
	ages, ok := got["journey.replica.heartbeat.age"].(metricdata.Gauge[float64])
	require.True(t, ok)
	require.Len(t, ages.DataPoints, 1)
	require.True(t, has(ages.DataPoints[0].Attributes, attribute.String("journey.replica", "otel-retry")))
	require.GreaterOrEqual(t, ages.DataPoints[0].Value, 0.0)
	states := got["journey.computation.count"].(metricdata.Gauge[int64])
	require.Len(t, states.DataPoints, 3, "y in PENDING, AVAILABLE and RUNNING")
	for _, p := range states.DataPoints {
		require.Zero(t, p.Value, "nothing is active any more")
	}

	// The spans: the Set, then the failed attempt linked to it, then the retry linked to the
	// failed attempt, whose completion created it.
	require.Len(t, spansNamed(rec, "journey.Start"), 1)
	sets := spansNamed(rec, "journey.Set")
	require.Len(t, sets, 1)
	attempts := spansNamed(rec, "journey.attempt")
	require.Len(t, attempts, 2)
	first, second := attempts[0], attempts[1]
	require.Equal(t, codes.Error, first.Status().Code)
	require.Equal(t, "failed: first try fails", first.Status().Description)
	require.Len(t, first.Events(), 1, "the error is recorded")
	require.Equal(t, "exception", first.Events()[0].Name)
	require.Len(t, first.Links(), 1)
	require.Equal(t, sets[0].SpanContext().TraceID(), first.Links()[0].SpanContext.TraceID())
	require.Equal(t, sets[0].SpanContext().SpanID(), first.Links()[0].SpanContext.SpanID())
	require.Equal(t, codes.Unset, second.Status().Code)
	require.Len(t, second.Links(), 1)
	require.Equal(t, first.SpanContext().SpanID(), second.Links()[0].SpanContext.SpanID())
	require.NotEqual(t, sets[0].SpanContext().TraceID(), first.SpanContext().TraceID(), "an attempt is a trace of its own")
}

// TestAttemptSpanLinksAcrossRuntimes sets a value on runtime A, whose dispatcher is held in its
// claim so that it claims nothing, and has runtime B run the attempt: B's attempt span links to
// A's Set span.
func TestAttemptSpanLinksAcrossRuntimes(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("otel_link", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.Int("x") * 2, nil
		}),
	})
	recA, recB := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	cfgA := testConfig(t, g)
	cfgA.ReplicaID = "replica-a"
	cfgA.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recA))
	// A's dispatcher waits in its claim until the test ends (or the claim's context does, after
	// which the claim fails), and so claims nothing.
	held := make(chan struct{})
	cfgA.Test.Hooks.Claiming = func(ctx context.Context) {
		select {
		case <-ctx.Done():
		case <-held:
		}
	}
	rtA := newRuntime(t, cfgA)
	t.Cleanup(func() { close(held) }) // before A stops
	cfgB := cfgA
	cfgB.ReplicaID = "replica-b"
	cfgB.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recB))
	cfgB.Test.Hooks.Claiming = nil
	rtB := newRuntime(t, cfgB)

	ctx := testCtx(t)
	ex, err := rtA.Start(ctx, g)
	require.NoError(t, err)
	_, err = rtA.Set(ctx, ex.ID, "x", 21)
	require.NoError(t, err)
	v, err := rtB.Get(ctx, ex.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, int64(42), v.Int())
	comps := attempts(t, rtB, ex.ID, "y")
	require.Len(t, comps, 1)
	require.Equal(t, "replica-b", comps[0].ReplicaID, "B ran it")

	sets := spansNamed(recA, "journey.Set")
	require.Len(t, sets, 1)
	require.Empty(t, spansNamed(recA, "journey.attempt"), "A ran nothing")
	var runs []sdktrace.ReadOnlySpan
	waitFor(t, "B's attempt span to end", func() bool {
		runs = spansNamed(recB, "journey.attempt")
		return len(runs) == 1
	})
	require.Len(t, runs[0].Links(), 1)
	link := runs[0].Links()[0].SpanContext
	require.Equal(t, sets[0].SpanContext().TraceID(), link.TraceID())
	require.Equal(t, sets[0].SpanContext().SpanID(), link.SpanID())
	require.True(t, link.IsRemote(), "the link was read back from the database")
	attrs := attribute.NewSet(runs[0].Attributes()...)
	require.True(t, has(attrs, attribute.String("journey.replica", "replica-b"), attribute.String("journey.execution.id", ex.ID),
		attribute.String("journey.node", "y")))
}
