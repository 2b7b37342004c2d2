package journey_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

func TestListFiltersAndSorts(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("listing", "v1", []graph.Node{graph.Input("n"), graph.Input("tag")})
	other := graph.MustNew("unlisted", "v1", []graph.Node{graph.Input("n")})
	rt := newRuntime(t, testConfig(t, g, other))
	ctx := testCtx(t)

	const total = 50
	ids := make([]string, total) // ids[i] has n = i; tag "even"/"odd" unless i%5 == 0
	for i := range total {
		ex, err := rt.Start(ctx, g)
		require.NoError(t, err)
		ids[i] = ex.ID
		values := map[string]any{"n": i}
		if i%5 != 0 {
			values["tag"] = map[bool]string{true: "even", false: "odd"}[i%2 == 0]
		}
		_, err = rt.SetMany(ctx, ex.ID, values)
		require.NoError(t, err)
	}
	stranger, err := rt.Start(ctx, other)
	require.NoError(t, err)
	_, err = rt.Set(ctx, stranger.ID, "n", 3)
	require.NoError(t, err)

	where := func(keep func(i int) bool) []string {
		var out []string
		for i, id := range ids {
			if keep(i) {
				out = append(out, id)
			}
		}
		return out
	}
	cases := []struct {
		name   string
		filter journey.Filter
		want   []string
	}{
		{"eq", journey.Eq("n", 7), where(func(i int) bool { return i == 7 })},
		{"neq", journey.Neq("tag", "even"), where(func(i int) bool { return i%5 != 0 && i%2 == 1 })},
		{"lt", journey.Lt("n", 10), where(func(i int) bool { return i < 10 })},
		{"lte", journey.Lte("n", 10), where(func(i int) bool { return i <= 10 })},
		{"gt", journey.Gt("n", 40), where(func(i int) bool { return i > 40 })},
		{"gte", journey.Gte("n", 40), where(func(i int) bool { return i >= 40 })},
		{"in", journey.In("n", 1, 2, 3, 99), where(func(i int) bool { return i >= 1 && i <= 3 })},
		{"set", journey.IsSet("tag"), where(func(i int) bool { return i%5 != 0 })},
		{"not set", journey.NotSet("tag"), where(func(i int) bool { return i%5 == 0 })},
	}
	for _, tc := range cases {
		q := journey.ListQuery{Graph: "listing", Filters: []journey.Filter{tc.filter}}
		got, err := rt.List(ctx, q)
		require.NoError(t, err, tc.name)
		gotIDs := make([]string, len(got))
		for i, e := range got {
			gotIDs[i] = e.ID
		}
		require.ElementsMatch(t, tc.want, gotIDs, tc.name)
		n, err := rt.Count(ctx, q)
		require.NoError(t, err, tc.name)
		require.Equal(t, int64(len(tc.want)), n, "Count agrees with List: %s", tc.name)
	}

	// Filters combine; sorting by a node's value is numeric for numbers; pages are stable.
	q := journey.ListQuery{
		Graph:   "listing",
		Filters: []journey.Filter{journey.Eq("tag", "even"), journey.Gte("n", 20)},
		OrderBy: "n", Desc: true,
	}
	all, err := rt.List(ctx, q)
	require.NoError(t, err)
	want := where(func(i int) bool { return i >= 20 && i%2 == 0 && i%5 != 0 })
	slices.Reverse(want)
	var gotIDs []string
	for _, e := range all {
		gotIDs = append(gotIDs, e.ID)
	}
	require.Equal(t, want, gotIDs)
	q.Limit, q.Offset = 3, 2
	page, err := rt.List(ctx, q)
	require.NoError(t, err)
	require.Len(t, page, 3)
	require.Equal(t, want[2:5], []string{page[0].ID, page[1].ID, page[2].ID})

	n, err := rt.Count(ctx, journey.ListQuery{Filters: []journey.Filter{journey.Eq("n", 3)}})
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "without a graph, every graph's executions count")

	_, err = rt.List(ctx, journey.ListQuery{Filters: []journey.Filter{{Node: "n", Op: "like", Value: 1}}})
	require.ErrorContains(t, err, `unknown filter operator "like"`)
	_, err = rt.List(ctx, journey.ListQuery{Filters: []journey.Filter{journey.Eq("n", make(chan int))}})
	require.ErrorIs(t, err, journey.ErrInvalidValue)
}
