// Package telemetry holds journey-go's OpenTelemetry instruments, and the W3C trace context that
// links an attempt's span to the span of the write that caused it.
//
// It depends on the OpenTelemetry API only: the application chooses the SDK and the exporters,
// through Config.MeterProvider and Config.TracerProvider. Metric attributes are bounded (graph,
// version, node, state, outcome, reason category, replica); execution ids go on spans only.
//
// It may import graph, never another package of the project.
package telemetry

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/journey-go/journey/graph"
)

// ScopeName names the meter and the tracer.
const ScopeName = "github.com/journey-go/journey"

// Attribute keys.
const (
	KeyGraph         = attribute.Key("journey.graph")
	KeyGraphVersion  = attribute.Key("journey.graph.version")
	KeyNode          = attribute.Key("journey.node")
	KeyOutcome       = attribute.Key("journey.outcome")
	KeyAbandonReason = attribute.Key("journey.abandon.reason")
	KeyState         = attribute.Key("journey.state")
	KeyReplica       = attribute.Key("journey.replica")
	KeyEvent         = attribute.Key("journey.event")
	KeyTarget        = attribute.Key("journey.target")
	// Span attributes only: they are not bounded.
	KeyExecution   = attribute.Key("journey.execution.id")
	KeyComputation = attribute.Key("journey.computation.id")
	KeyAttempt     = attribute.Key("journey.attempt")
	KeyExecutions  = attribute.Key("journey.executions")
	// KeyExecutionKey and KeyExisting are a keyed Start's key, and whether an execution held it
	// already.
	KeyExecutionKey = attribute.Key("journey.execution.key")
	KeyExisting     = attribute.Key("journey.execution.existing")
)

// Outcomes of an attempt, the values of KeyOutcome on journey.computation.finished.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeAbandoned = "abandoned"
	OutcomeClaimLost = "claim_lost"
)

// Outcomes of a delivery attempt, on journey.notification.deliveries.
const (
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed" // retried later
	DeliveryDead      = "dead"   // failed, and no retry is left
)

// durationBuckets are the histogram boundaries of the durations, in seconds.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// Telemetry is the tracer and the instruments of one runtime.
type Telemetry struct {
	Tracer       trace.Tracer
	meter        metric.Meter
	finished     metric.Int64Counter
	duration     metric.Float64Histogram
	claimWait    metric.Float64Histogram
	deliveries   metric.Int64Counter
	batch        metric.Int64Histogram
	states       metric.Int64ObservableGauge
	heartbeatAge metric.Float64ObservableGauge
	sets         sync.Map // attrKey → metric.MeasurementOption
}

// attrKey names the attributes of an attempt's measurement.
type attrKey struct {
	g                     *graph.Graph
	node, outcome, reason string
}

// attempt returns the attributes of a measurement of an attempt of node (with its outcome and
// reason, when given). Each set is made once and kept: there are few (the graphs' nodes, times the
// outcomes), and the hot path records two or three for every attempt.
func (t *Telemetry) attempt(g *graph.Graph, node, outcome, reason string) metric.MeasurementOption {
	k := attrKey{g, node, outcome, reason}
	if o, ok := t.sets.Load(k); ok {
		return o.(metric.MeasurementOption)
	}
	attrs := NodeAttrs(g, node)
	if outcome != "" {
		attrs = append(attrs, KeyOutcome.String(outcome))
	}
	if reason != "" {
		attrs = append(attrs, KeyAbandonReason.String(reason))
	}
	o, _ := t.sets.LoadOrStore(k, metric.WithAttributeSet(attribute.NewSet(attrs...)))
	return o.(metric.MeasurementOption)
}

// New creates the instruments on mp, and the tracer on tp.
func New(mp metric.MeterProvider, tp trace.TracerProvider) (*Telemetry, error) {
	m := mp.Meter(ScopeName)
	t := &Telemetry{Tracer: tp.Tracer(ScopeName), meter: m}
	var errs [7]error
	t.finished, errs[0] = m.Int64Counter("journey.computation.finished", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts that ended, by graph, node and outcome (succeeded, failed, abandoned with its reason, claim_lost)."))
	t.duration, errs[1] = m.Float64Histogram("journey.computation.duration", metric.WithUnit("s"),
		metric.WithDescription("The duration of an attempt on the replica that ran it, from its start to its outcome recorded."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	t.claimWait, errs[2] = m.Float64Histogram("journey.computation.claim_wait", metric.WithUnit("s"),
		metric.WithDescription("The time from an attempt becoming AVAILABLE to its claim."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	t.deliveries, errs[3] = m.Int64Counter("journey.notification.deliveries", metric.WithUnit("{delivery}"),
		metric.WithDescription("Attempts to deliver a lifecycle notification, by event, target kind and outcome."))
	t.batch, errs[4] = m.Int64Histogram("journey.completer.batch.size", metric.WithUnit("{outcome}"),
		metric.WithDescription("The outcomes the completer records in one transaction."),
		metric.WithExplicitBucketBoundaries(1, 2, 5, 10, 20, 50, 100, 200))
	t.states, errs[5] = m.Int64ObservableGauge("journey.computation.count", metric.WithUnit("{attempt}"),
		metric.WithDescription("PENDING, AVAILABLE and RUNNING attempts, by graph, node and state, sampled by the replica holding the sweep lease."))
	t.heartbeatAge, errs[6] = m.Float64ObservableGauge("journey.replica.heartbeat.age", metric.WithUnit("s"),
		metric.WithDescription("The time since the replica last wrote its heartbeat."))
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("creating the OpenTelemetry instruments: %w", err)
		}
	}
	return t, nil
}

// disabled records nothing.
var disabled, _ = New(metricnoop.NewMeterProvider(), tracenoop.NewTracerProvider())

// Disabled returns a Telemetry that records nothing: the default of the internal services.
func Disabled() *Telemetry { return disabled }

// Or returns t, or Disabled if t is nil.
func Or(t *Telemetry) *Telemetry {
	if t == nil {
		return disabled
	}
	return t
}

// NodeAttrs are the attributes that name a node of a graph.
func NodeAttrs(g *graph.Graph, node string) []attribute.KeyValue {
	return []attribute.KeyValue{KeyGraph.String(g.Name()), KeyGraphVersion.String(g.Version()), KeyNode.String(node)}
}

// Finished counts an attempt of node that ended with outcome; reason is the category of an
// abandonment, "" otherwise.
func (t *Telemetry) Finished(ctx context.Context, g *graph.Graph, node, outcome, reason string) {
	t.finished.Add(ctx, 1, t.attempt(g, node, outcome, reason))
}

// Ran records an attempt that ran on this replica: it counts it, and its duration.
func (t *Telemetry) Ran(ctx context.Context, g *graph.Graph, node, outcome string, d time.Duration) {
	t.Finished(ctx, g, node, outcome, "")
	t.duration.Record(ctx, d.Seconds(), t.attempt(g, node, outcome, ""))
}

// Claimed records the wait of an attempt of node from AVAILABLE to its claim.
func (t *Telemetry) Claimed(ctx context.Context, g *graph.Graph, node string, wait time.Duration) {
	t.claimWait.Record(ctx, max(wait, 0).Seconds(), t.attempt(g, node, "", ""))
}

// Delivered counts an attempt to deliver event to a target of kind target (handler or webhook).
func (t *Telemetry) Delivered(ctx context.Context, event, target, outcome string) {
	t.deliveries.Add(ctx, 1, metric.WithAttributes(KeyEvent.String(event), KeyTarget.String(target), KeyOutcome.String(outcome)))
}

// Batch records the size of a batch of outcomes recorded in one transaction.
func (t *Telemetry) Batch(ctx context.Context, n int) { t.batch.Record(ctx, int64(n)) }

// StateCount is the number of attempts of a node in an active state.
type StateCount struct {
	Graph, Version, Node, State string
	N                           int64
}

// Sampler feeds the observable instruments of one replica.
type Sampler struct {
	ReplicaID string
	// HeartbeatAge is the time since the replica last wrote its heartbeat.
	HeartbeatAge func() time.Duration
	// States counts the active attempts. ok is false when this replica does not sample them: it
	// does not hold the sweep lease.
	States func(ctx context.Context) (counts []StateCount, ok bool, err error)
}

// Observe registers the callback of the observable instruments. Unregister it when the replica
// stops.
func (t *Telemetry) Observe(s Sampler) (metric.Registration, error) {
	return t.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		o.ObserveFloat64(t.heartbeatAge, s.HeartbeatAge().Seconds(), metric.WithAttributes(KeyReplica.String(s.ReplicaID)))
		counts, ok, err := s.States(ctx)
		if err != nil || !ok {
			return err
		}
		for _, c := range counts {
			o.ObserveInt64(t.states, c.N, metric.WithAttributes(KeyGraph.String(c.Graph), KeyGraphVersion.String(c.Version),
				KeyNode.String(c.Node), KeyState.String(c.State)))
		}
		return nil
	}, t.states, t.heartbeatAge)
}

// traceContext formats and parses the W3C traceparent.
var traceContext = propagation.TraceContext{}

// Traceparent returns the W3C traceparent of the span in ctx, or nil if ctx holds none.
func Traceparent(ctx context.Context) *string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	traceContext.Inject(ctx, carrier)
	tp := carrier.Get("traceparent")
	return &tp
}

// Links returns a link to the span that traceparent names, if it names one.
func Links(traceparent *string) []trace.Link {
	if traceparent == nil {
		return nil
	}
	ctx := traceContext.Extract(context.Background(), propagation.MapCarrier{"traceparent": *traceparent})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return []trace.Link{{SpanContext: sc}}
}
