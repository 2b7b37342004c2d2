package persistence

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
)

// A replica that has not heard of a ResumeGraph makes its attempts PAUSED; the sweep makes them
// ready, and leaves alone those of a version paused again, and of a paused execution.
func TestSweepRevivesWhatNoPauseHolds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	recordGraphs(t, b.store)
	stale := b.newStore(t, Config{Graphs: []*graph.Graph{b.g}})
	_, err := b.store.SetGraphPaused(ctx, b.g.Name(), b.g.Version(), true)
	require.NoError(t, err)
	require.NoError(t, stale.RefreshPaused(ctx))
	changed, err := b.store.SetGraphPaused(ctx, b.g.Name(), b.g.Version(), false)
	require.NoError(t, err)
	require.True(t, changed)

	start := func() string { // on the stale replica, which holds the version as paused
		e, err := stale.CreateExecution(ctx, b.g)
		require.NoError(t, err)
		_, err = stale.SetValues(ctx, e.ID, map[string]json.RawMessage{"x": json.RawMessage(`1`)}, nil, nil)
		require.NoError(t, err)
		return e.ID
	}
	stateOf := func(id string) string {
		comps, err := b.store.Computations(ctx, id)
		require.NoError(t, err)
		require.Len(t, comps, 1)
		return comps[0].State
	}
	left, held := start(), start()
	require.NoError(t, b.store.SetPaused(ctx, held, true))
	require.Equal(t, StatePaused, stateOf(left))
	sweep := func() { // the sweeper's repair
		_, err := b.store.Repair(ctx, 100)
		require.NoError(t, err)
	}
	sweep()
	require.Equal(t, StateAvailable, stateOf(left), "nothing pauses it")
	require.Equal(t, StatePaused, stateOf(held), "its execution is paused")

	_, err = b.store.SetGraphPaused(ctx, b.g.Name(), b.g.Version(), true)
	require.NoError(t, err)
	require.Equal(t, StatePaused, stateOf(left))
	sweep()
	require.Equal(t, StatePaused, stateOf(left), "its version is paused again")
}
