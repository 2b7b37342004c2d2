package journey

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// The waiters keep the state that a write of this replica committed, and a Get that waits right
// after it (a Set, then a Get(WaitAny)) starts from it, with no look, as long as nothing newer
// has been heard of: a change heard, a write whose COMMIT's outcome is unknown, or a lost
// connection of the listener.
func TestWaiterStartsFromTheStateItsReplicaCommitted(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("known", "v1", []graph.Node{graph.Input("x"), graph.Input("w"), graph.Input("z")})
	x := graph.Values{"x": {Raw: []byte(`1`), Revision: 3}}
	commit := func(w *waiters, id string, rev int64, vals graph.Values, failed ...string) {
		w.Committing(id, rev)
		w.Committed(id, rev, vals)
		w.Known(id, rev, g, vals, failed)
	}
	known := func(w *waiters, id, node string, newer int64) bool {
		wt, remove, known := w.addKnown(id, node, newer, true)
		defer remove()
		if known {
			require.Equal(t, wt.seen.Load(), w.known[id].rev, "the waiter has seen the state")
		}
		return known
	}

	w := newWaiters()
	require.False(t, known(w, "e1", "w", 0), "nothing committed here")
	commit(w, "e1", 3, x)
	require.True(t, known(w, "e1", "w", 0))
	_, remove, ok := w.addKnown("e1", "w", 0, false)
	remove()
	require.False(t, ok, "only if asked")
	require.False(t, known(w, "e1", "x", 0), "x has a value: look")
	require.True(t, known(w, "e1", "x", 3), "x has no value newer than 3")
	require.False(t, known(w, "e1", "nope", 0), "no such node: the look says so")
	w.wake("e1", 3) // the write's own NOTIFY
	w.wake("e1", 2) // an older change, which the write saw
	require.True(t, known(w, "e1", "w", 0))

	// A change of the same execution from elsewhere, heard before the Get.
	w.wake("e1", 4)
	require.False(t, known(w, "e1", "w", 0))
	commit(w, "e1", 5, x) // a later write here saw it
	require.True(t, known(w, "e1", "w", 0))
	w.wake("e1", -1) // a change of unknown revision
	require.False(t, known(w, "e1", "w", 0))

	// A change heard between the write's COMMIT and its hand.
	w.Committing("e2", 1)
	w.wake("e2", 2)
	w.Committed("e2", 1, x)
	w.Known("e2", 1, g, x, nil)
	require.False(t, known(w, "e2", "w", 0))

	// A COMMIT whose outcome is unknown.
	commit(w, "e3", 1, x)
	w.Committing("e3", 2)
	w.Aborted("e3", 2)
	require.False(t, known(w, "e3", "w", 0))

	// A node that has failed for good.
	commit(w, "e4", 1, x, "w")
	require.False(t, known(w, "e4", "w", 0))
	require.True(t, known(w, "e4", "z", 0))

	// A state handed without its write having been followed since before its COMMIT.
	w.Known("e5", 1, g, x, nil)
	require.False(t, known(w, "e5", "w", 0))

	// The listener lost its connection: changes may have gone unheard.
	commit(w, "e6", 1, x)
	w.wakeAll()
	require.False(t, known(w, "e6", "w", 0))
	require.Equal(t, int64(math.MaxInt64), w.known["e6"].heard)

	// A waiter that started from the state is woken by the next change, and handed its value.
	commit(w, "e7", 1, x)
	wt, remove, ok := w.addKnown("e7", "w", 0, true)
	defer remove()
	require.True(t, ok)
	w.wake("e7", 1)
	require.False(t, woken(wt), "it has seen revision 1")
	v := graph.Value{Raw: []byte(`2`), Revision: 2}
	commit(w, "e7", 2, graph.Values{"w": v})
	require.True(t, woken(wt))
	require.Equal(t, v, *wt.handed.Load())

	// The oldest states are forgotten beyond maxKnown.
	for i := range maxKnown {
		w.Committing("f"+string(rune('a'+i%26))+time.Duration(i).String(), 1)
	}
	require.Len(t, w.known, maxKnown)
	require.NotContains(t, w.known, "e1")
}

// A Get(WaitAny) right after its replica's own Set does not look: it waits from the state the
// Set committed. A row written behind the runtime's back, with no notification, shows it: a look
// would have returned it. A change made by another replica in between is not missed, whether its
// NOTIFY came before the Get or after.
func TestGetAfterItsReplicasSetDoesNotLook(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	g := graph.MustNew("no-look", "v1", []graph.Node{
		graph.Input("x"),
		graph.Input("w"),
		graph.Compute("y", graph.Needs("x"), xPlusOneOnceReleased(release)),
	})
	schema := pgtest.Schema(t)
	newRT := func() *Runtime {
		return startRuntime(t, Config{DatabaseURL: pgtest.URL(t), Schema: schema, Graphs: []*graph.Graph{g},
			PollInterval: 30 * time.Second, SweepInterval: 50 * time.Millisecond})
	}
	a, b := newRT(), newRT()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	ex, err := a.Start(ctx, g)
	require.NoError(t, err)
	_, err = a.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)
	_, err = pgtest.DB(t).ExecContext(ctx, `INSERT INTO `+pgx.Identifier{schema, "values"}.Sanitize()+`
		(execution_id, node, value, revision, set_at) VALUES ($1, 'y', '"behind its back"', 99, now())`, ex.ID)
	require.NoError(t, err)
	got := make(chan graph.Value, 1)
	go func() {
		v, err := a.Get(ctx, ex.ID, "y", WaitAny())
		if err != nil {
			t.Errorf("waiting for y: %v", err)
		}
		got <- v
	}()
	for !getWaits(a.waiters, ex.ID) {
		select {
		case v := <-got:
			t.Fatalf("the Get looked, and returned %s", v.Raw)
		case <-ctx.Done():
			t.Fatal("the Get never waited")
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(release)
	require.Equal(t, int64(2), (<-got).Int(), "the computed value, not the row no one announced")

	// Another replica's change, heard before the Get: the Get looks.
	ex, err = a.Start(ctx, g)
	require.NoError(t, err)
	_, err = a.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)
	rev, err := b.Set(ctx, ex.ID, "w", "from b")
	require.NoError(t, err)
	heard := func() bool {
		a.waiters.mu.Lock()
		defer a.waiters.mu.Unlock()
		return a.waiters.known[ex.ID].heard >= rev
	}
	for !heard() {
		select {
		case <-ctx.Done():
			t.Fatal("a never heard of b's change")
		case <-time.After(5 * time.Millisecond):
		}
	}
	gctx, gcancel := context.WithTimeout(ctx, 5*time.Second) // far below the poll
	defer gcancel()
	v, err := a.Get(gctx, ex.ID, "w", WaitAny())
	require.NoError(t, err)
	require.Equal(t, "from b", v.String())

	// Another replica's change, heard after the Get began: it wakes the Get.
	ex, err = a.Start(ctx, g)
	require.NoError(t, err)
	_, err = a.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)
	_, remove, ok := a.waiters.addKnown(ex.ID, "w", 0, true)
	require.True(t, ok)
	remove()
	go func() {
		for !getWaits(a.waiters, ex.ID) {
			time.Sleep(time.Millisecond)
		}
		if _, err := b.Set(ctx, ex.ID, "w", "later from b"); err != nil {
			t.Errorf("setting w on b: %v", err)
		}
	}()
	v, err = a.Get(gctx, ex.ID, "w", WaitAny())
	require.NoError(t, err)
	require.Equal(t, "later from b", v.String())
}
