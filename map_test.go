package journey_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// lineGraph charges one line item: it completes once charged has its value.
func lineGraph(charge graph.ComputeFunc) *graph.Graph {
	return graph.MustNew("line", "v1", []graph.Node{
		graph.Input("sku"),
		graph.Input("cents"),
		graph.Compute("charged", graph.Needs("sku", "cents"), charge, graph.MaxAttempts(1)),
	}, graph.CompletesWhen(graph.Needs("charged")))
}

// ordersGraph charges each line of an order as a child execution of line, and totals the results.
func ordersGraph(line *graph.Graph, opts ...graph.NodeOption) *graph.Graph {
	return graph.MustNew("order", "v1", []graph.Node{
		graph.Input("lines"),
		graph.Map("charges", graph.Needs("lines"), line, func(in graph.Values) ([]map[string]any, error) {
			var lines []map[string]any
			if err := json.Unmarshal(in["lines"].Raw, &lines); err != nil {
				return nil, err
			}
			return lines, nil
		}, append([]graph.NodeOption{graph.Result("charged")}, opts...)...),
	})
}

func charge(ctx context.Context, in graph.Values) (any, error) {
	if in.String("sku") == "broken" {
		return nil, graph.Permanent(errors.New("card declined"))
	}
	return map[string]any{"sku": in.String("sku"), "cents": in.Int("cents")}, nil
}

func TestMapCollectsTheChildrenResultsInOrder(t *testing.T) {
	t.Parallel()
	line := lineGraph(charge)
	order := ordersGraph(line)
	rt := newRuntime(t, testConfig(t, order, line))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, order, journey.WithValues(map[string]any{"lines": []map[string]any{
		{"sku": "a", "cents": 100}, {"sku": "b", "cents": 250}, {"sku": "c", "cents": 5},
	}}))
	require.NoError(t, err)
	v, err := rt.Get(ctx, ex.ID, "charges", journey.WaitAny())
	require.NoError(t, err)
	require.JSONEq(t, `[{"sku":"a","cents":100},{"sku":"b","cents":250},{"sku":"c","cents":5}]`, string(v.Raw))

	// Parent and children link both ways, with the map's progress.
	summary, err := rt.Summarize(ctx, ex.ID)
	require.NoError(t, err)
	require.Contains(t, summary, "Node charges started 3 children: 3 ended")
	children := childrenOf(t, rt, ex.ID)
	require.Len(t, children, 3)
	for _, c := range children {
		require.Equal(t, journey.Parent{ID: ex.ID, Node: "charges", Index: c.Parent.Index}, *c.Parent)
		require.Equal(t, ex.ID+"/charges/"+strconv.Itoa(c.Parent.Index), c.Key, "keyed by parent, node and place")
		summary, err := rt.Summarize(ctx, c.ID)
		require.NoError(t, err)
		require.Contains(t, summary, fmt.Sprintf("Child %d of node charges of execution %s", c.Parent.Index, ex.ID))
	}
}

func TestMapFailsWithTheChildThatFailed(t *testing.T) {
	t.Parallel()
	line := lineGraph(charge)
	order := ordersGraph(line)
	rt := newRuntime(t, testConfig(t, order, line))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, order, journey.WithValues(map[string]any{"lines": []map[string]any{
		{"sku": "a", "cents": 100}, {"sku": "broken", "cents": 1},
	}}))
	require.NoError(t, err)
	waitFor(t, "the map to fail", func() bool { return countStates(t, rt, ex.ID, "charges")[journey.StateFailed] == 1 })
	tries := attempts(t, rt, ex.ID, "charges")
	require.Contains(t, tries[len(tries)-1].Error, "failed: charged: card declined")
}

// children lists the executions of graph line, archived included, by their parent's id.
func childrenOf(t *testing.T, rt *journey.Runtime, parent string) []*journey.Execution {
	t.Helper()
	list, err := rt.List(testCtx(t), journey.ListQuery{Graph: "line", IncludeArchived: true})
	require.NoError(t, err)
	var out []*journey.Execution
	for _, e := range list {
		if e.Parent != nil && e.Parent.ID == parent {
			out = append(out, e)
		}
	}
	return out
}

// A Map retried after a child failed starts no second child: it finds its children, and collects
// them again once the failed one has been retried and completed.
func TestMapRetriedStartsNoSecondChild(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	broken.Store(true)
	line := lineGraph(func(ctx context.Context, in graph.Values) (any, error) {
		if in.String("sku") == "flaky" && broken.Load() {
			return nil, graph.Permanent(errors.New("card declined"))
		}
		return in.String("sku"), nil
	})
	order := ordersGraph(line)
	rt := newRuntime(t, testConfig(t, order, line))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, order, journey.WithValues(map[string]any{"lines": []map[string]any{
		{"sku": "a", "cents": 1}, {"sku": "flaky", "cents": 2},
	}}))
	require.NoError(t, err)
	waitFor(t, "the map to fail", func() bool { return countStates(t, rt, ex.ID, "charges")[journey.StateFailed] == 1 })
	require.Len(t, childrenOf(t, rt, ex.ID), 2)

	require.NoError(t, rt.Retry(ctx, ex.ID, "charges"))
	waitFor(t, "the map to fail again", func() bool { return countStates(t, rt, ex.ID, "charges")[journey.StateFailed] == 2 })
	children := childrenOf(t, rt, ex.ID)
	require.Len(t, children, 2, "the retry found the children it had")

	broken.Store(false)
	flaky := children[0]
	if flaky.Parent.Index != 1 {
		flaky = children[1]
	}
	require.Equal(t, 1, flaky.Parent.Index)
	require.NoError(t, rt.Retry(ctx, flaky.ID, "charged"))
	_, err = rt.Get(ctx, flaky.ID, "charged", journey.WaitAny())
	require.NoError(t, err)
	require.NoError(t, rt.Retry(ctx, ex.ID, "charges"))
	v, err := rt.Get(ctx, ex.ID, "charges", journey.WaitAny())
	require.NoError(t, err)
	require.JSONEq(t, `["a", "flaky"]`, string(v.Raw))
	require.Len(t, childrenOf(t, rt, ex.ID), 2)
}

func TestMapCollectsFailuresWhenAsked(t *testing.T) {
	t.Parallel()
	line := lineGraph(charge)
	order := ordersGraph(line, graph.CollectFailures())
	rt := newRuntime(t, testConfig(t, order, line))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, order, journey.WithValues(map[string]any{"lines": []map[string]any{
		{"sku": "broken", "cents": 1}, {"sku": "b", "cents": 2},
	}}))
	require.NoError(t, err)
	v, err := rt.Get(ctx, ex.ID, "charges", journey.WaitAny())
	require.NoError(t, err)
	var got []map[string]any
	require.NoError(t, json.Unmarshal(v.Raw, &got))
	require.Len(t, got, 2)
	require.Equal(t, true, got[0]["failed"])
	require.Contains(t, got[0]["error"], "card declined")
	require.Equal(t, map[string]any{"sku": "b", "cents": float64(2)}, got[1])
}

// Child starts one execution; its value is that child's result. Without Result, the result is the
// object of the child's values.
func TestChildTakesItsOneChildResult(t *testing.T) {
	t.Parallel()
	line := lineGraph(charge)
	g := graph.MustNew("single", "v1", []graph.Node{
		graph.Input("sku"),
		graph.Child("one", graph.Needs("sku"), line, func(in graph.Values) (map[string]any, error) {
			return map[string]any{"sku": in.String("sku"), "cents": 7}, nil
		}),
	})
	rt := newRuntime(t, testConfig(t, g, line))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"sku": "z"}))
	require.NoError(t, err)
	v, err := rt.Get(ctx, ex.ID, "one", journey.WaitAny())
	require.NoError(t, err)
	require.JSONEq(t, `{"sku": "z", "cents": 7, "charged": {"sku": "z", "cents": 7}}`, string(v.Raw))
}

// When the parent's upstream changes while its children run, the map is computed again at once:
// the children of the values before are canceled and archived, which frees their keys, and the
// new values' children start.
func TestMapComputedAgainEndsTheChildrenBefore(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	line := lineGraph(func(ctx context.Context, in graph.Values) (any, error) {
		if in.String("sku") == "slow" {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return in.String("sku"), nil
	})
	order := ordersGraph(line)
	rt := newRuntime(t, testConfig(t, order, line))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, order, journey.WithValues(map[string]any{"lines": []map[string]any{{"sku": "slow", "cents": 1}}}))
	require.NoError(t, err)
	waitFor(t, "the map to wait for its child", func() bool { return countStates(t, rt, ex.ID, "charges")[journey.StateWaiting] == 1 })
	_, err = rt.Set(ctx, ex.ID, "lines", []map[string]any{{"sku": "x", "cents": 1}, {"sku": "y", "cents": 2}})
	require.NoError(t, err)
	waitFor(t, "the new value", func() bool {
		v, err := rt.Get(ctx, ex.ID, "charges")
		return err == nil && string(v.Raw) == `["x", "y"]`
	})
	close(gate)
	children := childrenOf(t, rt, ex.ID)
	require.Len(t, children, 3)
	for _, c := range children {
		if c.Parent.Index == 0 && c.CanceledAt != nil {
			require.NotNil(t, c.ArchivedAt, "the child before is archived")
			require.Contains(t, c.CancelReason, "computed again")
		}
	}
	var canceled int
	for _, c := range children {
		if c.CanceledAt != nil {
			canceled++
		}
	}
	require.Equal(t, 1, canceled, "the slow child of the values before")
}

// Cancel, Pause and Archive of a parent reach its children.
func TestParentCancelReachesTheChildren(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 2)
	line := lineGraph(func(ctx context.Context, in graph.Values) (any, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	order := ordersGraph(line)
	rt := newRuntime(t, testConfig(t, order, line))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, order, journey.WithValues(map[string]any{"lines": []map[string]any{{"sku": "a", "cents": 1}, {"sku": "b", "cents": 2}}}))
	require.NoError(t, err)
	for range 2 {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the children did not start")
		}
	}
	require.NoError(t, rt.Cancel(ctx, ex.ID, "customer left"))
	for _, c := range childrenOf(t, rt, ex.ID) {
		require.NotNil(t, c.CanceledAt, c.ID)
		require.Equal(t, "its parent "+ex.ID+" was canceled: customer left", c.CancelReason)
	}
}

// A child archived by hand has ended for its map, which collects it as a failure.
func TestMapCountsAChildArchivedByHand(t *testing.T) {
	t.Parallel()
	line := lineGraph(func(ctx context.Context, in graph.Values) (any, error) {
		if in.String("sku") == "stuck" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return in.String("sku"), nil
	})
	order := ordersGraph(line, graph.CollectFailures())
	rt := newRuntime(t, testConfig(t, order, line))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, order, journey.WithValues(map[string]any{"lines": []map[string]any{
		{"sku": "a", "cents": 1}, {"sku": "stuck", "cents": 2},
	}}))
	require.NoError(t, err)
	waitFor(t, "the map to wait for the stuck child", func() bool {
		return countStates(t, rt, ex.ID, "charges")[journey.StateWaiting] == 1
	})
	var stuck string
	for _, c := range childrenOf(t, rt, ex.ID) {
		if c.Parent.Index == 1 {
			stuck = c.ID
		}
	}
	require.NotEmpty(t, stuck)
	require.NoError(t, rt.Archive(ctx, stuck))
	v, err := rt.Get(ctx, ex.ID, "charges", journey.WaitAny())
	require.NoError(t, err)
	require.JSONEq(t, `["a", {"failed": true, "execution": "`+stuck+`", "error": "archived"}]`, string(v.Raw))
}

// A map node whose execution is paused or archived while its attempt runs starts its children as
// the pause or the archive would have left them (its cascade): paused, or archived, so that none
// runs while its parent is held. Resumed, the parent's children run and the map collects them;
// archived, they have ended, and the map fails with them, as after an archive that came later.
func TestMapStartsItsChildrenAsItsParentIsHeld(t *testing.T) {
	t.Parallel()
	for _, hold := range []string{"pause", "archive"} {
		t.Run(hold, func(t *testing.T) {
			t.Parallel()
			var ran atomic.Int32
			line := lineGraph(func(ctx context.Context, in graph.Values) (any, error) {
				ran.Add(1)
				return in.String("sku"), nil
			})
			splitting, split := make(chan struct{}), make(chan struct{})
			var once, freed sync.Once
			free := func() { freed.Do(func() { close(split) }) }
			t.Cleanup(free)
			order := graph.MustNew("order", "v1", []graph.Node{
				graph.Input("lines"),
				graph.Map("charges", graph.Needs("lines"), line, func(in graph.Values) ([]map[string]any, error) {
					once.Do(func() { close(splitting) })
					<-split // the attempt runs while its execution is held
					return []map[string]any{{"sku": "a", "cents": 1}, {"sku": "b", "cents": 2}}, nil
				}, graph.Result("charged")),
			})
			rt := newRuntime(t, testConfig(t, order, line))
			ctx := testCtx(t)
			ex, err := rt.Start(ctx, order, journey.WithValues(map[string]any{"lines": 2}))
			require.NoError(t, err)
			select {
			case <-splitting:
			case <-ctx.Done():
				t.Fatal("the map node never ran")
			}
			if hold == "pause" {
				require.NoError(t, rt.Pause(ctx, ex.ID))
			} else {
				require.NoError(t, rt.Archive(ctx, ex.ID))
			}
			free()
			if hold == "pause" {
				waitMap(t, rt, ex.ID)
			} else { // its children have all ended, archived: the map fails with them
				waitFor(t, "the map to fail", func() bool { return countStates(t, rt, ex.ID, "charges")[journey.StateFailed] == 1 })
			}

			children := childrenOf(t, rt, ex.ID)
			require.Len(t, children, 2)
			for _, c := range children {
				if hold == "pause" {
					require.NotNil(t, c.PausedAt, "child %d of a paused parent starts unpaused", c.Parent.Index)
					require.Equal(t, map[journey.ComputationState]int{journey.StatePaused: 1}, countStates(t, rt, c.ID, "charged"))
				} else {
					require.NotNil(t, c.ArchivedAt, "child %d of an archived parent starts unarchived", c.Parent.Index)
					require.Equal(t, map[journey.ComputationState]int{journey.StateCanceled: 1}, countStates(t, rt, c.ID, "charged"))
				}
			}
			require.Zero(t, ran.Load(), "a child of a held parent ran")
			if hold == "pause" {
				require.NoError(t, rt.Resume(ctx, ex.ID))
				v, err := rt.Get(ctx, ex.ID, "charges", journey.WaitAny())
				require.NoError(t, err)
				require.JSONEq(t, `["a", "b"]`, string(v.Raw))
			}
		})
	}
}
