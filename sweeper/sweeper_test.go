package sweeper_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/internal/telemetry"
	"github.com/journey-go/journey/migrations"
	"github.com/journey-go/journey/persistence"
	"github.com/journey-go/journey/sweeper"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	abandonAfter = 10 * time.Second
	hbTimeout    = 3 * time.Second
	staleAfter   = 20 * time.Second
)

// newSweeper returns a sweeper of cfg that the test's end releases: the roll of the insights
// that a pass starts runs apart from it, and must end before the schema is dropped.
func newSweeper(t *testing.T, cfg sweeper.Config) *sweeper.Sweeper {
	t.Helper()
	s := sweeper.New(cfg)
	t.Cleanup(func() { require.NoError(t, s.Release(context.Background())) })
	return s
}

// migrated returns a database handle and a schema of its own, migrated.
func migrated(t *testing.T) (*bun.DB, string) {
	t.Helper()
	schema := pgtest.Schema(t)
	db := pgtest.BunDB(t, pgtest.URL(t))
	_, err := migrations.Migrate(context.Background(), db, schema, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	return db, schema
}

type bundle struct {
	store   *persistence.Store
	clock   *clock.Stub
	sweeper *sweeper.Sweeper
	g       *graph.Graph
	exec    string
}

func setup(t *testing.T, name string) *bundle {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	db, schema := migrated(t)
	b := &bundle{clock: clock.NewStub(time.Now())}
	b.g = graph.MustNew(name, "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) { return 1, nil },
			graph.MaxAttempts(2), graph.AbandonAfter(abandonAfter), graph.Heartbeat(time.Second, hbTimeout),
			graph.Backoff(func(int) time.Duration { return 0 })),
	})
	var err error
	b.store = newStore(t, persistence.Config{DB: db, Schema: schema, Graphs: []*graph.Graph{b.g}, Clock: b.clock, Logger: logger})
	b.sweeper = newSweeper(t, sweeper.Config{Store: b.store, Logger: logger})
	e, err := b.store.CreateExecution(ctx, b.g)
	require.NoError(t, err)
	_, err = b.store.SetValues(ctx, e.ID, map[string]json.RawMessage{"x": json.RawMessage(`1`)}, nil, nil)
	require.NoError(t, err)
	b.exec = e.ID
	return b
}

// alive writes replica r1's heartbeat at the current time of the clock.
func (b *bundle) alive(t *testing.T) {
	t.Helper()
	beat(t, b.store, "r1", staleAfter, false)
}

func (b *bundle) claim(t *testing.T) *persistence.Computation {
	t.Helper()
	b.alive(t)
	got, err := b.store.Claim(context.Background(), "r1", 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	return got[0]
}

func (b *bundle) attempts(t *testing.T) []persistence.Computation {
	t.Helper()
	comps, err := b.store.Computations(context.Background(), b.exec)
	require.NoError(t, err)
	return comps
}

func TestAbandonsByEachDeadlineThenFails(t *testing.T) {
	t.Parallel()
	b := setup(t, "sweep")
	ctx := context.Background()
	b.claim(t)

	b.clock.Advance(hbTimeout - time.Millisecond)
	b.alive(t)
	res, err := b.sweeper.RunOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Abandoned, "nothing has expired yet")

	b.clock.Advance(2 * time.Millisecond) // past the heartbeat deadline, not the hard deadline
	b.alive(t)
	res, err = b.sweeper.RunOnce(ctx)
	require.NoError(t, err)
	require.Len(t, res.Abandoned, 1)
	comps := b.attempts(t)
	require.Len(t, comps, 2)
	require.Equal(t, persistence.StateAbandoned, comps[0].State)
	require.Equal(t, persistence.ReasonHeartbeat, *comps[0].Error)
	require.Equal(t, persistence.StateAvailable, comps[1].State, "attempts remain: the next one is created")
	require.Equal(t, 2, comps[1].Attempt)

	// The second attempt heartbeats until its hard deadline passes.
	c := b.claim(t)
	for range 4 {
		b.clock.Advance(hbTimeout - time.Second)
		beats, err := b.store.Heartbeat(ctx, "r1", []persistence.ClaimRef{c.Ref()})
		require.NoError(t, err)
		require.Equal(t, persistence.BeatAlive, beats[c.ID])
		b.alive(t)
		res, err = b.sweeper.RunOnce(ctx)
		require.NoError(t, err)
		require.Empty(t, res.Abandoned, "a heartbeating attempt within its deadline stays")
	}
	b.clock.Advance(abandonAfter)
	b.alive(t)
	res, err = b.sweeper.RunOnce(ctx)
	require.NoError(t, err)
	require.Len(t, res.Abandoned, 1)
	comps = b.attempts(t)
	require.Len(t, comps, 2, "attempts used up: no third attempt")
	require.Equal(t, persistence.ReasonDeadline, *comps[1].Error)
	ns, err := b.store.NodeState(ctx, b.exec, "y")
	require.NoError(t, err)
	require.True(t, ns.Failed())
}

func TestNeverOverwritesACompletedComputation(t *testing.T) {
	t.Parallel()
	b := setup(t, "completed")
	ctx := context.Background()
	c := b.claim(t)
	require.NoError(t, b.store.Complete(ctx, c, json.RawMessage(`7`), nil))
	b.clock.Advance(time.Hour)
	b.alive(t)
	res, err := b.sweeper.RunOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Abandoned)
	comps := b.attempts(t)
	require.Len(t, comps, 1)
	require.Equal(t, persistence.StateSuccess, comps[0].State)
}

func TestSkipsGraphsItDoesNotServe(t *testing.T) {
	t.Parallel()
	b := setup(t, "served")
	ctx := context.Background()
	b.claim(t)
	other := newStore(t, persistence.Config{
		DB: b.store.DB(), Schema: b.store.Schema(), Clock: b.clock,
		Graphs: []*graph.Graph{graph.MustNew("other", "v1", []graph.Node{graph.Input("a")})},
	})
	b.clock.Advance(time.Hour)
	b.alive(t)
	res, err := newSweeper(t, sweeper.Config{Store: other}).RunOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Abandoned, "a replica that does not serve the graph leaves its rows alone")
	require.Equal(t, persistence.StateRunning, b.attempts(t)[0].State)

	res, err = b.sweeper.RunOnce(ctx)
	require.NoError(t, err)
	require.Len(t, res.Abandoned, 1, "a replica that serves it abandons it")
}

func TestPromotesDueRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	db, schema := migrated(t)
	stub := clock.NewStub(time.Now())
	g := graph.MustNew("backoff", "v1", []graph.Node{
		graph.Compute("y", graph.Needs(), func(ctx context.Context, in graph.Values) (any, error) { return 1, nil },
			graph.Backoff(func(int) time.Duration { return time.Minute })),
	})
	store := newStore(t, persistence.Config{DB: db, Schema: schema, Graphs: []*graph.Graph{g}, Clock: stub, Logger: logger})
	e, err := store.CreateExecution(ctx, g)
	require.NoError(t, err)
	got, err := store.Claim(ctx, "r1", 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, store.Fail(ctx, got[0], context.DeadlineExceeded))

	comps, err := store.Computations(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, persistence.StatePending, comps[1].State, "the retry waits for its backoff")
	s := newSweeper(t, sweeper.Config{Store: store, Logger: logger})
	res, err := s.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Promoted)
	stub.Advance(time.Minute)
	res, err = s.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Promoted)
	got, err = store.Claim(ctx, "r1", 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, 2, got[0].Attempt)
}

func TestAbandonsTheWorkOfASilentReplica(t *testing.T) {
	t.Parallel()
	b := setup(t, "silent")
	ctx := context.Background()
	s := newSweeper(t, sweeper.Config{Store: b.store, ReplicaRetention: time.Hour})
	c := b.claim(t)
	// The replica says it is to be thought dead 2s after its last heartbeat.
	beat(t, b.store, "r1", 2*time.Second, false)

	b.clock.Advance(time.Second)
	beats, err := b.store.Heartbeat(ctx, "r1", []persistence.ClaimRef{c.Ref()})
	require.NoError(t, err)
	require.Equal(t, persistence.BeatAlive, beats[c.ID])
	res, err := s.RunOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Abandoned, "the replica is not stale yet")

	// Only the replica heartbeat stops: the computation's own deadlines still hold.
	b.clock.Advance(1500 * time.Millisecond)
	res, err = s.RunOnce(ctx)
	require.NoError(t, err)
	require.Len(t, res.Abandoned, 1)
	require.Equal(t, persistence.ReasonReplica("r1"), *res.Abandoned[0].Error)
	replicas, err := b.store.Replicas(ctx)
	require.NoError(t, err)
	require.Len(t, replicas, 1)

	b.clock.Advance(time.Hour)
	res, err = s.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Pruned, "the rows of long-gone replicas are deleted")
	replicas, err = b.store.Replicas(ctx)
	require.NoError(t, err)
	require.Empty(t, replicas)
}

// A replica is judged by the stale-after it wrote on its row, not by the sweeping replica's: one
// configured with longer intervals is alive, and its work must not run twice.
func TestJudgesAReplicaByItsOwnStaleAfter(t *testing.T) {
	t.Parallel()
	b := setup(t, "patient")
	ctx := context.Background()
	c := b.claim(t)
	beat(t, b.store, "r1", time.Minute, false)
	// Work that may take an hour: only the replica's staleness can end it here.
	_, err := b.store.DB().NewRaw("UPDATE ?.nodes SET deadline = ?", bun.Ident(b.store.Schema()), b.clock.Now().Add(time.Hour)).Exec(ctx)
	require.NoError(t, err)

	b.clock.Advance(30 * time.Second) // older than the default 20s, younger than its own minute
	_, err = b.store.Heartbeat(ctx, "r1", []persistence.ClaimRef{c.Ref()})
	require.NoError(t, err)
	res, err := b.sweeper.RunOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Abandoned, "a replica within its own stale-after is alive")

	b.clock.Advance(31 * time.Second)
	_, err = b.store.Heartbeat(ctx, "r1", []persistence.ClaimRef{c.Ref()})
	require.NoError(t, err)
	res, err = b.sweeper.RunOnce(ctx)
	require.NoError(t, err)
	require.Len(t, res.Abandoned, 1, "past its own stale-after, it is dead")
	require.Equal(t, persistence.ReasonReplica("r1"), *res.Abandoned[0].Error)
}

// A process that starts under the replica id of a dead one (a pod restarted under its name)
// heartbeats for the id, but the work the dead process claimed is not its own.
func TestAbandonsTheWorkOfAnEarlierProcessOfTheSameReplica(t *testing.T) {
	t.Parallel()
	b := setup(t, "restarted")
	ctx := context.Background()
	c := b.claim(t)
	b.clock.Advance(time.Second)
	res, err := b.sweeper.RunOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Abandoned)

	// The process dies and another starts with the same id; its heartbeats are fresh.
	beat(t, b.store, "r1", staleAfter, true)
	res, err = b.sweeper.RunOnce(ctx)
	require.NoError(t, err)
	require.Len(t, res.Abandoned, 1)
	require.Equal(t, c.ID, res.Abandoned[0].ID)
	require.Equal(t, persistence.ReasonRestarted("r1"), *res.Abandoned[0].Error)

	// What the new process claims is its own.
	again := b.claim(t)
	require.Equal(t, 2, again.Attempt)
	b.clock.Advance(time.Second)
	b.alive(t)
	res, err = b.sweeper.RunOnce(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Abandoned)
}

func TestAbandonsTheWorkOfAReplicaWithoutARow(t *testing.T) {
	t.Parallel()
	b := setup(t, "ghost")
	ctx := context.Background()
	got, err := b.store.Claim(ctx, "ghost", 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	res, err := b.sweeper.RunOnce(ctx)
	require.NoError(t, err)
	require.Len(t, res.Abandoned, 1)
	require.Equal(t, persistence.ReasonReplica("ghost"), *res.Abandoned[0].Error)
}

func TestAbandonmentTelemetry(t *testing.T) {
	t.Parallel()
	b := setup(t, "telemetry")
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	rec := tracetest.NewSpanRecorder()
	tel, err := telemetry.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	require.NoError(t, err)
	store := newStore(t, persistence.Config{DB: b.store.DB(), Schema: b.store.Schema(), Clock: b.clock,
		Graphs: []*graph.Graph{b.g}, Tracer: tel.Tracer})
	sw := newSweeper(t, sweeper.Config{Store: store, ReplicaID: "r1", Telemetry: tel})
	_, sampled, err := sw.SampleStates(ctx)
	require.NoError(t, err)
	require.False(t, sampled, "no pass has taken the sweep lease yet")

	b.claim(t)
	b.clock.Advance(hbTimeout + time.Millisecond)
	b.alive(t)
	res, err := sw.RunOnce(ctx)
	require.NoError(t, err)
	require.Len(t, res.Abandoned, 1)

	// The metric counts the abandonment by its reason's category.
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	require.Len(t, rm.ScopeMetrics, 1)
	var finished metricdata.Sum[int64]
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "journey.computation.finished" {
			finished = m.Data.(metricdata.Sum[int64])
		}
	}
	require.Len(t, finished.DataPoints, 1)
	p := finished.DataPoints[0]
	require.Equal(t, int64(1), p.Value)
	for key, want := range map[string]string{"journey.graph": "telemetry", "journey.node": "y",
		"journey.outcome": telemetry.OutcomeAbandoned, "journey.abandon.reason": persistence.CategoryHeartbeat} {
		v, ok := p.Attributes.Value(attribute.Key(key))
		require.True(t, ok, key)
		require.Equal(t, want, v.AsString(), key)
	}

	// The span records the reason, and the retry links to it.
	spans := rec.Ended()
	require.Len(t, spans, 1)
	span := spans[0]
	require.Equal(t, "journey.abandon", span.Name())
	require.Equal(t, codes.Error, span.Status().Code)
	require.Equal(t, persistence.ReasonHeartbeat, span.Status().Description)
	require.Contains(t, span.Attributes(), telemetry.KeyAbandonReason.String(persistence.CategoryHeartbeat))
	retry := b.claim(t)
	require.Equal(t, 2, retry.Attempt)
	links := telemetry.Links(retry.Traceparent)
	require.Len(t, links, 1)
	require.Equal(t, span.SpanContext().TraceID(), links[0].SpanContext.TraceID())
	require.Equal(t, span.SpanContext().SpanID(), links[0].SpanContext.SpanID())

	// This replica holds the sweep lease: it samples the active attempts.
	counts, sampled, err := sw.SampleStates(ctx)
	require.NoError(t, err)
	require.True(t, sampled)
	require.ElementsMatch(t, []telemetry.StateCount{
		{Graph: "telemetry", Version: "v1", Node: "y", State: persistence.StatePending},
		{Graph: "telemetry", Version: "v1", Node: "y", State: persistence.StateAvailable},
		{Graph: "telemetry", Version: "v1", Node: "y", State: persistence.StateRunning, N: 1},
	}, counts)
}

// Passes start Interval apart: after a pass slower than Interval, the next starts at once, and
// what came due during the slow pass (here the work of a replica without a heartbeat) is
// abandoned then, not a whole Interval after the slow pass ended.
func TestPassesStartIntervalApart(t *testing.T) {
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	db, schema := migrated(t)
	g := graph.MustNew("cadence", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) { return 1, nil },
			graph.Backoff(func(int) time.Duration { return 0 })),
	})
	abandoning := make(chan int64, 2)
	release := make(chan struct{})
	var calls atomic.Int32
	store := newStore(t, persistence.Config{DB: db, Schema: schema, Graphs: []*graph.Graph{g}, Logger: logger,
		Hooks: persistence.Hooks{Abandoning: func(c *persistence.Computation) {
			abandoning <- c.ID
			if calls.Add(1) == 1 {
				<-release // the first abandonment holds up its pass
			}
		}}})
	// expired starts an execution and claims its attempt as a replica with no heartbeat row.
	expired := func() int64 {
		e, err := store.CreateExecution(ctx, g)
		require.NoError(t, err)
		_, err = store.SetValues(ctx, e.ID, map[string]json.RawMessage{"x": json.RawMessage(`1`)}, nil, nil)
		require.NoError(t, err)
		got, err := store.Claim(ctx, "dead", 1)
		require.NoError(t, err)
		require.Len(t, got, 1)
		return got[0].ID
	}
	first := expired()

	const interval = 4 * time.Second
	system := actor.NewActorSystem()
	s := newSweeper(t, sweeper.Config{Store: store, ReplicaID: "r1", Interval: interval, Logger: logger})
	pid := system.Root.Spawn(s.Props())
	t.Cleanup(func() { _ = system.Root.StopFuture(pid).Wait() })
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the stop, if the test fails while the pass is held

	select {
	case id := <-abandoning:
		require.Equal(t, first, id)
	case <-time.After(30 * time.Second):
		t.Fatal("the first pass did not abandon the expired attempt")
	}
	second := expired()  // the held pass has read its attempts: the next pass finds this one
	time.Sleep(interval) // the length of the slow pass: the fault this test makes
	free()
	released := time.Now()
	select {
	case id := <-abandoning:
		require.Equal(t, second, id)
		// A pass Interval after the slow one's end would come later than this; the slack is
		// what the end of the slow pass and the next one's search take on a busy machine.
		require.Less(t, time.Since(released), interval, "the next pass starts at once after a pass slower than Interval")
	case <-time.After(30 * time.Second):
		t.Fatal("no pass abandoned the second expired attempt")
	}
}

// A pass that leaves retention behind is followed by another soon, not an Interval later: with
// batches of 2, the eleven values replaced past their retention are all deleted after one timed
// pass, in an Interval of an hour.
func TestRetentionBehindSweepsAgainSoon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	db, schema := migrated(t)
	g := graph.MustNew("retention", "v1", []graph.Node{graph.Input("x")})
	stub := clock.NewStub(time.Now())
	store := newStore(t, persistence.Config{DB: db, Schema: schema, Graphs: []*graph.Graph{g}, Clock: stub, Logger: logger})
	e, err := store.CreateExecution(ctx, g)
	require.NoError(t, err)
	for x := range 12 {
		_, err := store.SetValues(ctx, e.ID, map[string]json.RawMessage{"x": json.RawMessage(strconv.Itoa(x))}, nil, nil)
		require.NoError(t, err)
	}
	history := func() int {
		var n int
		require.NoError(t, db.NewRaw("SELECT count(*) FROM "+pgx.Identifier{schema, "value_history"}.Sanitize()).Scan(ctx, &n))
		return n
	}
	require.Equal(t, 11, history(), "the values replaced")
	stub.Advance(2 * time.Hour)

	s := newSweeper(t, sweeper.Config{Store: store, ReplicaID: "r1", Interval: time.Hour, BatchSize: 2, Retention: time.Hour, Logger: logger})
	system := actor.NewActorSystem()
	pid := system.Root.Spawn(s.Props())
	t.Cleanup(func() { _ = system.Root.StopFuture(pid).Wait() })
	system.Root.Send(pid, sweeper.Tick{})
	require.Eventually(t, func() bool { return history() == 0 }, 30*time.Second, 10*time.Millisecond,
		"the passes after the first deleted the rest")
}

// The sweep lease holder warns of executions with work left on a graph version that no live
// replica serves, with their count, and says nothing once a replica serves it.
func TestStrandedVersionIsWarnedOf(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, schema := migrated(t)
	g := graph.MustNew("stranded", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) { return 1, nil }),
	})
	store := newStore(t, persistence.Config{DB: db, Schema: schema, Graphs: []*graph.Graph{g},
		Logger: slog.New(slog.DiscardHandler)})
	_, err := store.CreateExecutions(ctx, g, []map[string]json.RawMessage{{"x": json.RawMessage("1")}, {"x": json.RawMessage("2")}, nil}, nil, nil, nil)
	require.NoError(t, err)

	var log strings.Builder
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s := newSweeper(t, sweeper.Config{Store: store, ReplicaID: "sweeper-only", StrandedEvery: time.Nanosecond, Logger: logger})
	_, err = s.RunOnce(ctx)
	require.NoError(t, err)
	require.Contains(t, log.String(), "no live replica serves")
	require.Contains(t, log.String(), "graph_version=stranded@v1 executions=2", "the two executions with work, not the idle one")

	// A live replica that serves it: no warning.
	beat(t, store, "serving", time.Minute, true)
	log.Reset()
	_, err = s.RunOnce(ctx)
	require.NoError(t, err)
	require.NotContains(t, log.String(), "no live replica serves")
}

// The sweep lease holder rolls the insights up apart from its pass, and Release waits for it.
func TestRollsTheInsightsUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, schema := migrated(t)
	stub := clock.NewStub(time.Now())
	g := graph.MustNew("roll", "v1", []graph.Node{graph.Input("x")})
	store := newStore(t, persistence.Config{DB: db, Schema: schema, Graphs: []*graph.Graph{g}, Clock: stub,
		Logger: slog.New(slog.DiscardHandler)})
	_, err := store.CreateExecutions(ctx, g, []map[string]json.RawMessage{{"x": json.RawMessage("1")}, nil}, nil, nil, nil)
	require.NoError(t, err)
	stub.Advance(3 * time.Minute) // the executions' minute is no longer filling

	s := newSweeper(t, sweeper.Config{Store: store, ReplicaID: "r1", InsightsEvery: time.Nanosecond, Logger: slog.New(slog.DiscardHandler)})
	_, err = s.RunOnce(ctx)
	require.NoError(t, err)
	cells := func() (n int) {
		require.NoError(t, db.NewRaw("SELECT coalesce(sum(n), 0) FROM "+schema+".insight_cells WHERE measure = 'executions'").Scan(ctx, &n))
		return n
	}
	require.Eventually(t, func() bool { return cells() == 2 }, 10*time.Second, 5*time.Millisecond)
}

// beat writes the heartbeat of replica, as its one process would: start takes its row over.
func beat(t *testing.T, s *persistence.Store, replica string, staleAfter time.Duration, start bool) {
	t.Helper()
	res, err := s.ReplicaHeartbeat(context.Background(), replica,
		persistence.Identity{Incarnation: "00000000-0000-4000-8000-000000000001", Holder: "the test"}, staleAfter, start)
	require.NoError(t, err)
	require.False(t, res.Taken)
}

// newStore returns a store of cfg that knows its schema's layout, as a runtime's does: on Citus,
// its statements name their lanes.
func newStore(t *testing.T, cfg persistence.Config) *persistence.Store {
	t.Helper()
	s, err := persistence.New(cfg)
	require.NoError(t, err)
	require.NoError(t, s.ReadLayout(t.Context()))
	return s
}
