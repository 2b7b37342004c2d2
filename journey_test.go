package journey_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

func TestOnboarding(t *testing.T) {
	t.Parallel()
	g := onboardingGraph(t)
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)

	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	require.Equal(t, int64(0), ex.Revision)

	rev, err := rt.Set(ctx, ex.ID, "name", "Mario")
	require.NoError(t, err)
	require.Equal(t, int64(1), rev)
	rev, err = rt.Set(ctx, ex.ID, "email", "mario@example.com")
	require.NoError(t, err)
	require.Equal(t, int64(2), rev)

	v, err := rt.Get(ctx, ex.ID, "greeting", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, "Welcome, Mario at mario@example.com", v.String())
	require.Equal(t, rev+2, v.Revision, "the greeting lands two revisions after email: one for the claim, one for the completion")

	s, err := journey.GetAs[string](ctx, rt, ex.ID, "greeting")
	require.NoError(t, err)
	require.Equal(t, "Welcome, Mario at mario@example.com", s)

	vals, err := rt.Values(ctx, ex.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), vals["name"].Revision)
	require.Equal(t, int64(2), vals["email"].Revision)

	loaded, err := rt.Load(ctx, ex.ID)
	require.NoError(t, err)
	require.Equal(t, int64(4), loaded.Revision)
}

func TestSetIsIdempotent(t *testing.T) {
	t.Parallel()
	g := onboardingGraph(t)
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)

	rev, err := rt.Set(ctx, ex.ID, "name", "Mario")
	require.NoError(t, err)
	require.Equal(t, int64(1), rev)
	again, err := rt.Set(ctx, ex.ID, "name", "Mario")
	require.NoError(t, err)
	require.Equal(t, rev, again, "the same value set twice keeps the revision")
	v, err := rt.Get(ctx, ex.ID, "name")
	require.NoError(t, err)
	require.Equal(t, int64(1), v.Revision)

	withMeta, err := rt.Set(ctx, ex.ID, "name", "Mario", journey.WithMetadata(map[string]string{"by": "admin"}))
	require.NoError(t, err)
	require.Equal(t, int64(2), withMeta, "the same value with new metadata is a change")

	many, err := rt.SetMany(ctx, ex.ID, map[string]any{"name": "Luigi", "email": "luigi@example.com"})
	require.NoError(t, err)
	require.Equal(t, withMeta+1, many, "SetMany is one revision")
	vals, err := rt.Values(ctx, ex.ID)
	require.NoError(t, err)
	require.Equal(t, many, vals["name"].Revision)
	require.Equal(t, many, vals["email"].Revision)
}

func TestBadInputIsRejectedAndChangesNothing(t *testing.T) {
	t.Parallel()
	g := onboardingGraph(t)
	other := graph.MustNew("other", "v1", []graph.Node{graph.Input("a")})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "name", "Mario")
	require.NoError(t, err)

	cases := []struct {
		name string
		do   func() error
		want error
		text string
	}{
		{"set a compute node", func() error { _, err := rt.Set(ctx, ex.ID, "greeting", "hi"); return err }, journey.ErrNotInput, `"greeting"`},
		{"set an unknown node", func() error { _, err := rt.Set(ctx, ex.ID, "no_such_node", "x"); return err }, journey.ErrUnknownNode, `"no_such_node"`},
		{"unset an unknown node", func() error { _, err := rt.Unset(ctx, ex.ID, "no_such_node"); return err }, journey.ErrUnknownNode, `"no_such_node"`},
		{"set in an unknown execution", func() error { _, err := rt.Set(ctx, "ONBNOPE", "name", "x"); return err }, journey.ErrNotFound, "ONBNOPE"},
		{"get in an unknown execution", func() error { _, err := rt.Get(ctx, "ONBNOPE", "name"); return err }, journey.ErrNotFound, "ONBNOPE"},
		{"a channel", func() error { _, err := rt.Set(ctx, ex.ID, "email", make(chan int)); return err }, journey.ErrInvalidValue, `"email"`},
		{"a func", func() error { _, err := rt.Set(ctx, ex.ID, "email", func() {}); return err }, journey.ErrInvalidValue, `"email"`},
		{"a bad value among good ones", func() error {
			_, err := rt.SetMany(ctx, ex.ID, map[string]any{"name": "Luigi", "email": func() {}})
			return err
		}, journey.ErrInvalidValue, `"email"`},
		{"an unregistered graph", func() error { _, err := rt.Start(ctx, other); return err }, journey.ErrUnknownGraph, `"other"`},
		{"get an unset node", func() error { _, err := rt.Get(ctx, ex.ID, "email"); return err }, journey.ErrNotSet, `"email"`},
	}
	for _, tc := range cases {
		err := tc.do()
		require.ErrorIs(t, err, tc.want, tc.name)
		require.Contains(t, err.Error(), tc.text, tc.name)
	}

	e, err := rt.Load(ctx, ex.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), e.Revision, "nothing changed")
	vals, err := rt.Values(ctx, ex.ID)
	require.NoError(t, err)
	require.Equal(t, "Mario", vals.String("name"))
	require.False(t, vals.Has("email"))
}
