package journey_test

import (
	"context"
	"encoding/json"
	"errors"
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
