package journey_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

func TestSetRejectsValuesPostgreSQLCannotStore(t *testing.T) {
	t.Parallel()
	g := onboardingGraph(t)
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)

	const nul = "NUL character (\\u0000), which PostgreSQL jsonb cannot store"
	for _, tc := range []struct {
		name string
		set  func() (int64, error)
		want []string
	}{
		{"a string", func() (int64, error) { return rt.Set(ctx, ex.ID, "name", "Ma\x00rio") }, []string{`node "name"`, nul}},
		{"a map key", func() (int64, error) { return rt.Set(ctx, ex.ID, "name", map[string]int{"k\x00": 1}) }, []string{`node "name"`, nul}},
		{"a raw message", func() (int64, error) { return rt.Set(ctx, ex.ID, "name", json.RawMessage(`["\u0000"]`)) }, []string{`node "name"`, nul}},
		{"one of many", func() (int64, error) {
			return rt.SetMany(ctx, ex.ID, map[string]any{"name": "Mario", "email": "mario\x00@example.com"})
		}, []string{`node "email"`, nul}},
		{"metadata", func() (int64, error) {
			return rt.Set(ctx, ex.ID, "name", "Mario", journey.WithMetadata("by\x00me"))
		}, []string{"metadata", nul}},
		{"over the default size", func() (int64, error) {
			return rt.Set(ctx, ex.ID, "name", strings.Repeat("x", journey.DefaultMaxValueBytes))
		}, []string{`node "name"`, "1048578 bytes", "limit of 1048576 bytes", "raise Config.MaxValueBytes"}},
	} {
		_, err := tc.set()
		require.ErrorIs(t, err, journey.ErrInvalidValue, tc.name)
		for _, want := range tc.want {
			require.ErrorContains(t, err, want, tc.name)
		}
	}
	vals, err := rt.Values(ctx, ex.ID)
	require.NoError(t, err)
	require.Empty(t, vals, "bad input writes nothing")
	after, err := rt.Load(ctx, ex.ID)
	require.NoError(t, err)
	require.Equal(t, ex.Revision, after.Revision, "bad input changes nothing")

	// An escaped backslash followed by u0000 is a plain string, not a NUL.
	_, err = rt.Set(ctx, ex.ID, "name", `\u0000`)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "email", json.RawMessage(`"\\\\\\u0000"`))
	require.NoError(t, err)
	name, err := journey.GetAs[string](ctx, rt, ex.ID, "name")
	require.NoError(t, err)
	require.Equal(t, `\u0000`, name)
	email, err := journey.GetAs[string](ctx, rt, ex.ID, "email")
	require.NoError(t, err)
	require.Equal(t, `\\\u0000`, email)
}

func TestResultWithNULFailsAtOnce(t *testing.T) {
	t.Parallel()
	bad := func(ctx context.Context, in graph.Values) (any, error) { return "bad\x00result", nil }
	g := graph.MustNew("nul", "v1", []graph.Node{
		graph.Input("x"),
		graph.Input("target"),
		graph.Compute("c", graph.Needs("x"), bad),
		graph.Mutate("m", graph.Needs("x"), bad, []string{"target"}),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)
	for _, node := range []string{"c", "m"} {
		_, err = rt.Get(ctx, ex.ID, node, journey.WaitAny())
		require.ErrorIs(t, err, journey.ErrComputationFailed, node)
		got := attempts(t, rt, ex.ID, node)
		require.Len(t, got, 1, "%s: no retry", node)
		require.Equal(t, journey.StateFailed, got[0].State, node)
		require.Contains(t, got[0].Error, "NUL", node)
		require.Contains(t, got[0].Error, node, node)
	}
	_, err = rt.Get(ctx, ex.ID, "target")
	require.ErrorIs(t, err, journey.ErrNotSet, "the mutate wrote nothing")
}

func TestMaxValueBytes(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("sizes", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("big", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return strings.Repeat("b", 63), nil // 65 bytes of JSON
		}),
		graph.Historian("h", graph.Needs("x"), graph.MaxEntries(10)),
	})
	cfg := testConfig(t, g)
	cfg.MaxValueBytes = 64
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)

	_, err = rt.Set(ctx, ex.ID, "x", strings.Repeat("x", 63))
	require.ErrorIs(t, err, journey.ErrInvalidValue)
	for _, want := range []string{`node "x"`, "65 bytes", "limit of 64 bytes", "raise Config.MaxValueBytes"} {
		require.ErrorContains(t, err, want)
	}
	_, err = rt.Set(ctx, ex.ID, "x", 1, journey.WithMetadata(strings.Repeat("m", 63)))
	require.ErrorIs(t, err, journey.ErrInvalidValue)
	require.ErrorContains(t, err, "metadata")
	vals, err := rt.Values(ctx, ex.ID)
	require.NoError(t, err)
	require.Empty(t, vals, "a value over the limit writes nothing")

	_, err = rt.Set(ctx, ex.ID, "x", strings.Repeat("x", 62)) // 64 bytes: at the limit
	require.NoError(t, err)
	_, err = rt.Get(ctx, ex.ID, "big", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)
	got := attempts(t, rt, ex.ID, "big")
	require.Len(t, got, 1, "a result over the limit is not retried")
	require.Equal(t, journey.StateFailed, got[0].State)
	require.Contains(t, got[0].Error, `the result of "big" cannot be stored: it is 65 bytes of JSON, over the limit of 64 bytes`)

	h, err := rt.Get(ctx, ex.ID, "h")
	require.NoError(t, err)
	require.Greater(t, len(h.Raw), cfg.MaxValueBytes, "the values the runtime builds are not capped")
	var entries []json.RawMessage
	require.NoError(t, h.Decode(&entries))
	require.Len(t, entries, 1)
}

func TestSchemaNameIsCheckedAtNew(t *testing.T) {
	t.Parallel()
	g := onboardingGraph(t)
	for _, schema := range []string{"what?", "nul\x00", strings.Repeat("s", 64)} {
		cfg := testConfig(t, g)
		cfg.Schema = schema
		cfg.SkipMigrations = true
		_, err := journey.New(context.Background(), cfg)
		require.ErrorContains(t, err, "config: Schema", "%q", schema)
		require.ErrorContains(t, err, "schema name", "%q", schema)
	}
}
