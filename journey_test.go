package journey_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
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
