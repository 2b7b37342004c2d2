package journey_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// chainGraph is a, b → c → d: set at revision 1, c lands at 3 and d at 5.
func chainGraph(saved func(node string)) *graph.Graph {
	return graph.MustNew("chain", "v1", []graph.Node{
		graph.Input("a", graph.OnSave(func(ctx context.Context, e graph.SaveEvent) { saved(e.Node) })),
		graph.Input("b"),
		graph.Compute("c", graph.Needs("a", "b"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.Int("a") + in.Int("b"), nil
		}),
		graph.Compute("d", graph.Needs("c"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.Int("c") * 10, nil
		}),
	})
}

// incGraph is x → y = x+1.
func incGraph() *graph.Graph {
	return graph.MustNew("inc", "v1", []graph.Node{
		graph.Input("x"),
		graph.Input("note"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.Int("x") + 1, nil
		}),
	})
}

// countRows counts the rows of a table in the runtime's schema.
func countRows(t *testing.T, schema, table string) int {
	t.Helper()
	var n int
	require.NoError(t, pgtest.DB(t).QueryRowContext(testCtx(t),
		"SELECT count(*) FROM "+pgx.Identifier{schema, table}.Sanitize()).Scan(&n))
	return n
}

// requireNothingWritten fails unless the schema holds no execution and nothing of one.
func requireNothingWritten(t *testing.T, schema string) {
	t.Helper()
	for _, table := range []string{"executions", "nodes", "value_history", "attempts"} {
		require.Zero(t, countRows(t, schema, table), "rows in %s", table)
	}
}

// outcome is what an execution ends with, compared between two ways of starting it.
type outcome struct {
	Revision     int64
	Values       map[string]string // node → "value@revision"
	History      []string          // "node=value@revision", oldest first
	Computations []string          // "node#attempt:state", oldest first
}

func outcomeOf(t *testing.T, rt *journey.Runtime, id string) outcome {
	t.Helper()
	ctx := testCtx(t)
	waitIdle(t, rt, id)
	ex, err := rt.Load(ctx, id)
	require.NoError(t, err)
	o := outcome{Revision: ex.Revision, Values: map[string]string{}}
	vals, err := rt.Values(ctx, id)
	require.NoError(t, err)
	for name, v := range vals {
		o.Values[name] = fmt.Sprintf("%s@%d", v.Raw, v.Revision)
	}
	hist, err := rt.History(ctx, id)
	require.NoError(t, err)
	for _, h := range hist {
		o.History = append(o.History, fmt.Sprintf("%s=%s@%d", h.Node, h.Value, h.Revision))
	}
	comps, err := rt.Computations(ctx, id)
	require.NoError(t, err)
	for _, c := range comps {
		o.Computations = append(o.Computations, fmt.Sprintf("%s#%d:%s", c.Node, c.Attempt, c.State))
	}
	return o
}

func TestStartWithValuesIsStartThenSetMany(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	saved := map[string]int{}
	g := chainGraph(func(node string) { mu.Lock(); saved[node]++; mu.Unlock() })
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	values := map[string]any{"a": 2, "b": 3}

	// Today's path: Start, then SetMany.
	ex1, err := rt.Start(ctx, g)
	require.NoError(t, err)
	require.Equal(t, int64(0), ex1.Revision)
	rev, err := rt.SetMany(ctx, ex1.ID, values)
	require.NoError(t, err)
	require.Equal(t, int64(1), rev, "SetMany right after Start is revision 1")

	// The option.
	ex2, err := rt.Start(ctx, g, journey.WithValues(values))
	require.NoError(t, err)
	require.Equal(t, int64(1), ex2.Revision, "the values are set as one change")

	for _, ex := range []*journey.Execution{ex1, ex2} {
		d, err := rt.Get(ctx, ex.ID, "d", journey.WaitAny())
		require.NoError(t, err)
		require.Equal(t, int64(50), d.Int())
		require.Equal(t, int64(5), d.Revision, "set at 1: c claimed at 2 and done at 3, d at 4 and 5")
	}
	want, got := outcomeOf(t, rt, ex1.ID), outcomeOf(t, rt, ex2.ID)
	require.Equal(t, want, got)
	require.Equal(t, []string{"c#1:SUCCESS", "d#1:SUCCESS"}, got.Computations)
	waitFor(t, "OnSave of a for both executions", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return saved["a"] == 2
	})
}

func TestStartMany(t *testing.T) {
	t.Parallel()
	g := incGraph()
	cfg := testConfig(t, g)
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)

	inputs := []map[string]any{
		{"x": 0},
		{"x": 1, "note": "one"},
		nil, // an execution with no values
		{"x": 3, "note": `quote " backslash \\ braces {} comma , é`},
		{}, // as nil
	}
	execs, err := rt.StartMany(ctx, g, inputs)
	require.NoError(t, err)
	require.Len(t, execs, len(inputs))
	ids := map[string]bool{}
	for i, ex := range execs {
		require.False(t, ids[ex.ID], "each item gets its own execution")
		ids[ex.ID] = true
		require.Equal(t, "inc", ex.Graph)
		require.Equal(t, "v1", ex.Version)
		vals, err := rt.Values(ctx, ex.ID)
		require.NoError(t, err)
		if len(inputs[i]) == 0 {
			require.Equal(t, int64(0), ex.Revision, "item %d", i)
			require.Empty(t, vals, "item %d", i)
			require.Empty(t, attempts(t, rt, ex.ID, "y"), "item %d: nothing to compute", i)
			continue
		}
		require.Equal(t, int64(1), ex.Revision, "item %d", i)
		require.Equal(t, int64(i), vals["x"].Int(), "item %d is in the order given", i)
		require.Equal(t, int64(1), vals["x"].Revision)
		y, err := rt.Get(ctx, ex.ID, "y", journey.WaitAny())
		require.NoError(t, err)
		require.Equal(t, int64(i)+1, y.Int())
		require.Equal(t, int64(3), y.Revision)
	}
	for _, i := range []int{1, 3} {
		note, err := rt.Get(ctx, execs[i].ID, "note")
		require.NoError(t, err)
		require.Equal(t, inputs[i]["note"], note.String())
	}
	require.Equal(t, len(inputs), countRows(t, cfg.Schema, "executions"))
}

func TestStartManyEmpty(t *testing.T) {
	t.Parallel()
	g := incGraph()
	cfg := testConfig(t, g)
	rt := newRuntime(t, cfg)
	for _, inputs := range [][]map[string]any{nil, {}} {
		execs, err := rt.StartMany(testCtx(t), g, inputs)
		require.NoError(t, err)
		require.NotNil(t, execs)
		require.Empty(t, execs)
	}
	requireNothingWritten(t, cfg.Schema)
}

func TestStartManyBadInput(t *testing.T) {
	t.Parallel()
	g := incGraph()
	cfg := testConfig(t, g)
	cfg.MaxValueBytes = 64
	rt := newRuntime(t, cfg)
	for _, tc := range []struct {
		name   string
		item   map[string]any
		node   string
		target error
	}{
		{"unknown node", map[string]any{"x": 1, "nope": 1}, "nope", journey.ErrUnknownNode},
		{"not an input", map[string]any{"x": 1, "y": 1}, "y", journey.ErrNotInput},
		{"not JSON", map[string]any{"x": 1, "note": func() {}}, "note", journey.ErrInvalidValue},
		{"NaN", map[string]any{"note": math.NaN()}, "note", journey.ErrInvalidValue},
		{"too large", map[string]any{"note": strings.Repeat("z", 100)}, "note", journey.ErrInvalidValue},
		{"NUL", map[string]any{"note": "a\x00b"}, "note", journey.ErrInvalidValue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inputs := []map[string]any{{"x": 1}, nil, tc.item}
			execs, err := rt.StartMany(testCtx(t), g, inputs)
			require.ErrorIs(t, err, tc.target)
			require.Nil(t, execs)
			require.Contains(t, err.Error(), "inputs[2]")
			require.Contains(t, err.Error(), fmt.Sprintf("%q", tc.node))
			t.Logf("error: %v", err)
			requireNothingWritten(t, cfg.Schema)

			// Start with the same values refuses them the same way, without an item.
			ex, err := rt.Start(testCtx(t), g, journey.WithValues(tc.item))
			require.ErrorIs(t, err, tc.target)
			require.Nil(t, ex)
			require.NotContains(t, err.Error(), "inputs[")
			requireNothingWritten(t, cfg.Schema)
		})
	}
}

func TestStartManyUnknownGraph(t *testing.T) {
	t.Parallel()
	g := incGraph()
	cfg := testConfig(t, g)
	rt := newRuntime(t, cfg)
	other := graph.MustNew("inc", "v2", []graph.Node{graph.Input("x")})
	for _, bad := range []*graph.Graph{other, nil} {
		execs, err := rt.StartMany(testCtx(t), bad, []map[string]any{{"x": 1}})
		require.ErrorIs(t, err, journey.ErrUnknownGraph)
		require.Nil(t, execs)
		ex, err := rt.Start(testCtx(t), bad, journey.WithValues(map[string]any{"x": 1}))
		require.ErrorIs(t, err, journey.ErrUnknownGraph)
		require.Nil(t, ex)
	}
	requireNothingWritten(t, cfg.Schema)
}

func TestStartManyAfterStop(t *testing.T) {
	t.Parallel()
	g := incGraph()
	cfg := testConfig(t, g)
	rt, err := journey.New(testCtx(t), cfg)
	require.NoError(t, err)
	require.NoError(t, rt.Stop(testCtx(t)))
	_, err = rt.StartMany(testCtx(t), g, []map[string]any{{"x": 1}})
	require.True(t, errors.Is(err, journey.ErrStopped), "got %v", err)
}

// Executions started in bulk respect a concurrency key and a parallel limit, like executions
// started one by one.
func TestStartManyRespectsGating(t *testing.T) {
	t.Parallel()
	const n, limit = 20, 3
	o := newOverlap(map[string]int{"limited": limit})
	g := graph.MustNew("gated", "v1", []graph.Node{
		graph.Input("k"),
		graph.Compute("keyed", graph.Needs("k"), func(ctx context.Context, in graph.Values) (any, error) {
			return "ok", o.hold(ctx, "keyed", 20*time.Millisecond)
		}, graph.ConcurrencyKey(func(in graph.Values) string { return in.String("k") })),
		graph.Compute("limited", graph.Needs("k"), func(ctx context.Context, in graph.Values) (any, error) {
			return "ok", o.hold(ctx, "limited", 20*time.Millisecond)
		}, graph.MaxParallel(limit)),
	})
	cfg := testConfig(t, g)
	a := newRuntime(t, cfg)
	cfg.ReplicaID = "second"
	b := newRuntime(t, cfg)
	ctx := testCtx(t)

	inputs := make([]map[string]any, n)
	for i := range inputs {
		inputs[i] = map[string]any{"k": "shared"}
	}
	execs, err := a.StartMany(ctx, g, inputs)
	require.NoError(t, err)
	for _, ex := range execs {
		for _, node := range []string{"keyed", "limited"} {
			_, err := b.Get(ctx, ex.ID, node, journey.WaitAny())
			require.NoError(t, err)
		}
	}
	require.Equal(t, 1, o.maxOf("keyed"), "the shared key never has two computations running at once")
	require.LessOrEqual(t, o.maxOf("limited"), limit, "never more than the limit running at once")
	o.requireMet(t, "limited", "the limit can be used")
}
