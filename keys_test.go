package journey_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// setupKeyed gives a test of keys a runtime serving incGraph on a fresh schema.
func setupKeyed(t *testing.T) (*graph.Graph, journey.Config, *journey.Runtime, context.Context) {
	t.Helper()
	g := incGraph()
	cfg := testConfig(t, g)
	return g, cfg, newRuntime(t, cfg), testCtx(t)
}

// startPaths are the ways a Start goes: alone, for a caller's trace; grouped with other Starts
// that set values; and, with no values on a graph that starts idle, grouped with Sets.
var startPaths = []struct {
	name   string
	values map[string]any
	traced bool
}{
	{"with values", map[string]any{"x": 1}, false},
	{"idle", nil, false},
	{"traced", map[string]any{"x": 1}, true},
}

// A Start with a key that an execution holds returns that execution, Existing, with its own
// values not applied and nothing advanced; on every path a Start takes.
func TestStartWithAKeyHeldReturnsItsExecution(t *testing.T) {
	t.Parallel()
	for _, path := range startPaths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			g := incGraph()
			cfg := testConfig(t, g)
			rec := tracetest.NewSpanRecorder()
			if path.traced { // then every Start goes alone, in a span of its own
				cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			}
			rt := newRuntime(t, cfg)
			ctx := testCtx(t)

			first, err := rt.Start(ctx, g, journey.WithKey("order-1042"), journey.WithValues(path.values))
			require.NoError(t, err)
			require.False(t, first.Existing)
			require.Equal(t, "order-1042", first.Key)
			if path.values != nil {
				_, err = rt.Get(ctx, first.ID, "y", journey.WaitAny())
				require.NoError(t, err)
			}
			before := outcomeOf(t, rt, first.ID)

			again, err := rt.Start(ctx, g, journey.WithKey("order-1042"), journey.WithValues(map[string]any{"x": 7, "note": "retry"}))
			require.NoError(t, err)
			require.True(t, again.Existing, "a retried Start finds the execution")
			require.Equal(t, first.ID, again.ID)
			require.Equal(t, "order-1042", again.Key)
			require.Equal(t, before.Revision, again.Revision, "at the revision it has")
			require.Equal(t, before, outcomeOf(t, rt, first.ID), "its values are not applied, and nothing ran again")
			require.Equal(t, 1, countRows(t, cfg.Schema, "executions"))

			loaded, err := rt.Load(ctx, first.ID)
			require.NoError(t, err)
			require.Equal(t, "order-1042", loaded.Key)
			require.False(t, loaded.Existing, "Existing is only for Start")
			summary, err := rt.Summarize(ctx, first.ID)
			require.NoError(t, err)
			require.Contains(t, summary, `version "v1", key "order-1042", revision `)

			other, err := rt.Start(ctx, g, journey.WithKey("order-1043"))
			require.NoError(t, err)
			require.False(t, other.Existing, "another key, another execution")
			require.NotEqual(t, first.ID, other.ID)

			if !path.traced {
				return
			}
			var existing []bool
			for _, s := range spansNamed(rec, "journey.Start") {
				attrs := attribute.NewSet(s.Attributes()...)
				require.True(t, has(attrs, attribute.String("journey.execution.id", first.ID)) ||
					has(attrs, attribute.String("journey.execution.id", other.ID)))
				v, ok := attrs.Value("journey.execution.existing")
				require.True(t, ok, "a keyed Start's span says whether the execution held the key")
				existing = append(existing, v.AsBool())
			}
			require.Equal(t, []bool{false, true, false}, existing)
		})
	}
}

// Concurrent Starts with one key, from many goroutines on two replicas and on every path, make
// exactly one execution: every caller gets its id, and exactly one sees Existing false.
func TestConcurrentKeyedStartsMakeOneExecution(t *testing.T) {
	t.Parallel()
	g := incGraph()
	cfg := testConfig(t, g)
	replicas := []*journey.Runtime{newRuntime(t, cfg)}
	cfg.ReplicaID = "second"
	replicas = append(replicas, newRuntime(t, cfg))
	ctx := testCtx(t)

	const keys, callers = 5, 24 // callers per key
	type answer struct {
		ex  *journey.Execution
		err error
	}
	answers := make([][]answer, keys)
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for k := range keys {
		answers[k] = make([]answer, callers)
		for c := range callers {
			wg.Go(func() {
				<-begin
				path := startPaths[c%len(startPaths)]
				ctx := ctx
				if path.traced { // a valid span context sends the Start alone, as a caller's trace does
					ctx = trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
						TraceID: trace.TraceID{1}, SpanID: trace.SpanID{byte(c + 1)}}))
				}
				ex, err := replicas[c%len(replicas)].Start(ctx, g, journey.WithKey(fmt.Sprintf("key-%d", k)),
					journey.WithValues(path.values))
				answers[k][c] = answer{ex, err}
			})
		}
	}
	close(begin)
	wg.Wait()

	for k := range keys {
		ids, started := map[string]bool{}, 0
		for c, a := range answers[k] {
			require.NoError(t, a.err, "key %d, caller %d", k, c)
			ids[a.ex.ID] = true
			if !a.ex.Existing {
				started++
			}
		}
		require.Len(t, ids, 1, "key %d: every caller got the same execution", k)
		require.Equal(t, 1, started, "key %d: exactly one caller started it", k)
	}
	require.Equal(t, keys, countRows(t, cfg.Schema, "executions"), "one execution per key")
}

// StartMany with WithKeys: a key held returns its execution, a key repeated in the call resolves
// to one execution, and "" is no key.
func TestStartManyWithKeys(t *testing.T) {
	t.Parallel()
	g, cfg, rt, ctx := setupKeyed(t)
	held, err := rt.Start(ctx, g, journey.WithKey("a"), journey.WithValues(map[string]any{"x": 100}))
	require.NoError(t, err)

	inputs := []map[string]any{{"x": 1}, {"x": 2}, {"x": 3}, {"x": 4}, nil}
	execs, err := rt.StartMany(ctx, g, inputs, journey.WithKeys([]string{"a", "b", "", "b", "c"}))
	require.NoError(t, err)
	require.Len(t, execs, len(inputs))

	require.Equal(t, held.ID, execs[0].ID, "a key held returns its execution")
	require.True(t, execs[0].Existing)
	require.False(t, execs[1].Existing)
	require.Equal(t, "b", execs[1].Key)
	require.False(t, execs[2].Existing)
	require.Empty(t, execs[2].Key)
	require.Equal(t, execs[1].ID, execs[3].ID, "a key repeated in the call is one execution")
	require.True(t, execs[3].Existing)
	require.False(t, execs[4].Existing)
	require.Equal(t, int64(0), execs[4].Revision)
	require.Equal(t, 4, countRows(t, cfg.Schema, "executions"), "a, b, the unkeyed one and c")

	for id, want := range map[string]int64{held.ID: 100, execs[1].ID: 2, execs[2].ID: 3} {
		x, err := rt.Get(ctx, id, "x")
		require.NoError(t, err)
		require.Equal(t, want, x.Int(), "the values of the item that started it, and no other")
	}

	again, err := rt.StartMany(ctx, g, inputs, journey.WithKeys([]string{"a", "b", "d", "b", "c"}))
	require.NoError(t, err)
	for i, ex := range again {
		require.Equal(t, i != 2, ex.Existing, "item %d", i)
	}
	require.Equal(t, 5, countRows(t, cfg.Schema, "executions"), "d alone is new")

	_, err = rt.StartMany(ctx, g, inputs, journey.WithKeys([]string{"e"}))
	require.ErrorContains(t, err, "WithKeys was given 1 keys for 5 inputs")
	require.Equal(t, 5, countRows(t, cfg.Schema, "executions"), "nothing started")
}

// A key that cannot reach PostgreSQL is refused before any SQL, by Start, StartMany (naming the
// item) and FindByKey, with a *TextError; a key of the largest size is fine.
func TestBadKeysStartNothing(t *testing.T) {
	t.Parallel()
	g, cfg, rt, ctx := setupKeyed(t)
	for _, tc := range []struct{ name, key, rule string }{
		{"NUL", "order\x00-1", "NUL"},
		{"invalid UTF-8", "order-\xff", "UTF-8"},
		{"too long", strings.Repeat("k", 1025), "over the limit of 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range startPaths {
				ex, err := rt.Start(ctx, g, journey.WithKey(tc.key), journey.WithValues(path.values))
				requireKeyRefused(t, err, tc.rule)
				require.Nil(t, ex)
			}
			execs, err := rt.StartMany(ctx, g, []map[string]any{{"x": 1}, nil, {"x": 2}},
				journey.WithKeys([]string{"fine", "", tc.key}))
			requireKeyRefused(t, err, tc.rule)
			require.ErrorContains(t, err, "inputs[2]")
			require.Nil(t, execs)
			requireNothingWritten(t, cfg.Schema)
			_, err = rt.FindByKey(ctx, g.Name(), tc.key)
			requireKeyRefused(t, err, tc.rule)
		})
	}
	ex, err := rt.Start(ctx, g, journey.WithKey(strings.Repeat("k", 1024)))
	require.NoError(t, err)
	found, err := rt.FindByKey(ctx, g.Name(), ex.Key)
	require.NoError(t, err)
	require.Equal(t, ex.ID, found.ID)
}

func requireKeyRefused(t *testing.T, err error, rule string) {
	t.Helper()
	require.ErrorIs(t, err, journey.ErrInvalidText)
	var te *journey.TextError
	require.True(t, errors.As(err, &te), "%v", err)
	require.Equal(t, "key", te.Field)
	require.Contains(t, te.Rule, rule)
}

// Archiving frees the key; unarchiving an execution whose key another holds fails with
// ErrKeyHeld and changes nothing, and works once that one is archived. FindByKey and List follow.
func TestArchiveFreesTheKey(t *testing.T) {
	t.Parallel()
	g, _, rt, ctx := setupKeyed(t)
	first, err := rt.Start(ctx, g, journey.WithKey("k"), journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	found, err := rt.FindByKey(ctx, "inc", "k")
	require.NoError(t, err)
	require.Equal(t, first.ID, found.ID)
	require.Equal(t, "k", found.Key)
	_, err = rt.Get(ctx, first.ID, "y", journey.WaitAny()) // nothing runs while it is archived
	require.NoError(t, err)

	require.NoError(t, rt.Archive(ctx, first.ID))
	_, err = rt.FindByKey(ctx, "inc", "k")
	require.ErrorIs(t, err, journey.ErrNotFound)
	second, err := rt.Start(ctx, g, journey.WithKey("k"))
	require.NoError(t, err)
	require.False(t, second.Existing, "the archived execution's key is free")
	require.NotEqual(t, first.ID, second.ID)

	archived, err := rt.Load(ctx, first.ID, journey.IncludeArchived())
	require.NoError(t, err)
	err = rt.Unarchive(ctx, first.ID)
	require.ErrorIs(t, err, journey.ErrKeyHeld)
	require.ErrorContains(t, err, `holds its key "k"`)
	after, err := rt.Load(ctx, first.ID, journey.IncludeArchived())
	require.NoError(t, err)
	require.Equal(t, archived, after, "the refused Unarchive changed nothing")
	found, err = rt.FindByKey(ctx, "inc", "k")
	require.NoError(t, err)
	require.Equal(t, second.ID, found.ID)

	idsOf := func(q journey.ListQuery) []string {
		t.Helper()
		execs, err := rt.List(ctx, q)
		require.NoError(t, err)
		n, err := rt.Count(ctx, q)
		require.NoError(t, err)
		require.Equal(t, int64(len(execs)), n)
		var ids []string
		for _, e := range execs {
			require.Equal(t, "k", e.Key)
			ids = append(ids, e.ID)
		}
		return ids
	}
	require.Equal(t, []string{second.ID}, idsOf(journey.ListQuery{Key: "k"}))
	require.Equal(t, []string{first.ID, second.ID}, idsOf(journey.ListQuery{Key: "k", IncludeArchived: true}))
	require.Empty(t, idsOf(journey.ListQuery{Key: "nobody's"}))

	require.NoError(t, rt.Archive(ctx, second.ID))
	require.NoError(t, rt.Unarchive(ctx, first.ID), "the key is free again")
	found, err = rt.FindByKey(ctx, "inc", "k")
	require.NoError(t, err)
	require.Equal(t, first.ID, found.ID)
	_, err = rt.SetMany(ctx, first.ID, map[string]any{"x": 2})
	require.NoError(t, err)
	_, err = rt.Get(ctx, first.ID, "y", journey.WaitNewerThan(after.Revision))
	require.NoError(t, err, "the unarchived execution goes on")

	_, err = rt.FindByKey(ctx, "no such graph", "k")
	require.ErrorIs(t, err, journey.ErrNotFound)
	_, err = rt.FindByKey(ctx, "inc", "")
	require.ErrorIs(t, err, journey.ErrNotFound)
}

// Starts and archives of one key that race: every Start gets an execution that held the key, and
// never more than one unarchived execution holds it.
func TestKeyedStartsRaceArchives(t *testing.T) {
	t.Parallel()
	g, _, rt, ctx := setupKeyed(t)
	const rounds, starters = 30, 4
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, starters)
	for c := range starters {
		wg.Go(func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				ex, err := rt.Start(ctx, g, journey.WithKey("k"), journey.WithValues(startPaths[c%2].values))
				if err == nil && ex.Key != "k" {
					err = fmt.Errorf("got an execution of key %q", ex.Key)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range rounds {
		ex, err := rt.Start(ctx, g, journey.WithKey("k"))
		require.NoError(t, err)
		require.NoError(t, rt.Archive(ctx, ex.ID))
	}
	close(done)
	wg.Wait()
	for range starters {
		require.NoError(t, <-errs)
	}
	n, err := rt.Count(ctx, journey.ListQuery{Key: "k"})
	require.NoError(t, err)
	require.LessOrEqual(t, n, int64(1))
	all, err := rt.Count(ctx, journey.ListQuery{Key: "k", IncludeArchived: true})
	require.NoError(t, err)
	require.GreaterOrEqual(t, all, int64(rounds))
}

// A key holds across the versions of a graph: a Start of v2 finds the execution of v1.
func TestKeyHoldsAcrossVersions(t *testing.T) {
	t.Parallel()
	v1 := incGraph()
	v2 := graph.MustNew("inc", "v2", []graph.Node{graph.Input("x")})
	cfg := testConfig(t, v1, v2)
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	old, err := rt.Start(ctx, v1, journey.WithKey("k"))
	require.NoError(t, err)
	ex, err := rt.Start(ctx, v2, journey.WithKey("k"))
	require.NoError(t, err)
	require.True(t, ex.Existing)
	require.Equal(t, old.ID, ex.ID)
	require.Equal(t, "v1", ex.Version)
}

// A singleton graph has at most one unarchived execution: concurrent Starts and StartMany find
// it; a key of one's own is refused; archiving frees its one key.
func TestSingletonGraph(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("heartbeat", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("beat", graph.Needs(), func(context.Context, graph.Values) (any, error) { return "ok", nil }),
	}, graph.Singleton())
	cfg := testConfig(t, g)
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)

	const callers = 16
	exs := make([]*journey.Execution, callers)
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for c := range callers {
		wg.Go(func() {
			<-begin
			ex, err := rt.Start(ctx, g, journey.WithValues(startPaths[c%2].values))
			if err != nil {
				t.Errorf("caller %d: %v", c, err)
			}
			exs[c] = ex
		})
	}
	close(begin)
	wg.Wait()
	started := 0
	for _, ex := range exs {
		require.Equal(t, exs[0].ID, ex.ID)
		require.Equal(t, graph.SingletonKey, ex.Key)
		if !ex.Existing {
			started++
		}
	}
	require.Equal(t, 1, started)
	_, err := rt.Get(ctx, exs[0].ID, "beat", journey.WaitAny())
	require.NoError(t, err)

	found, err := rt.FindByKey(ctx, "heartbeat", graph.SingletonKey)
	require.NoError(t, err)
	require.Equal(t, exs[0].ID, found.ID)
	many, err := rt.StartMany(ctx, g, []map[string]any{{"x": 1}, nil})
	require.NoError(t, err)
	for _, ex := range many {
		require.Equal(t, exs[0].ID, ex.ID)
		require.True(t, ex.Existing)
	}

	_, err = rt.Start(ctx, g, journey.WithKey("mine"))
	require.ErrorIs(t, err, journey.ErrSingleton)
	_, err = rt.StartMany(ctx, g, []map[string]any{nil}, journey.WithKeys([]string{"mine"}))
	require.ErrorIs(t, err, journey.ErrSingleton)
	require.ErrorContains(t, err, "inputs[0]")
	require.Equal(t, 1, countRows(t, cfg.Schema, "executions"))

	require.NoError(t, rt.Archive(ctx, exs[0].ID))
	next, err := rt.Start(ctx, g)
	require.NoError(t, err)
	require.False(t, next.Existing)
	require.NotEqual(t, exs[0].ID, next.ID)
}
