package journey

import (
	"context"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

func TestPoolSizeFromTheURL(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("pool", "v1", []graph.Node{graph.Input("x")})
	for _, tc := range []struct {
		maxConns string // pool_max_conns in the URL
		want     int32
	}{
		{"3", 3},
		{"", DefaultMaxConns},
	} {
		u, err := url.Parse(pgtest.URL(t))
		require.NoError(t, err)
		if tc.maxConns != "" {
			q := u.Query()
			q.Set("pool_max_conns", tc.maxConns)
			u.RawQuery = q.Encode()
		}
		rt, err := New(context.Background(), Config{
			DatabaseURL: u.String(), Schema: pgtest.Schema(t), Graphs: []*graph.Graph{g},
			Logger: slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		got := rt.pool.Config().MaxConns
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		require.NoError(t, rt.Stop(ctx))
		cancel()
		require.Equal(t, tc.want, got, "pool_max_conns=%q", tc.maxConns)
	}
}

// A waiter is woken by a change it has not seen, and by a change of unknown revision; not by a
// change at a revision its last look already read.
func TestWaiterWokenOnlyByChangesItHasNotSeen(t *testing.T) {
	t.Parallel()
	w := newWaiters()
	wt, remove := w.add("e1", "x", 0)
	defer remove()
	w.wake("e1", 3)
	require.True(t, woken(wt), "before its first look, any change wakes it")
	wt.seen.Store(5)
	w.wake("e1", 5)
	w.wake("e1", 4)
	w.wake("e2", 9)
	require.False(t, woken(wt), "revisions 4 and 5 were in its look; e2 is another execution")
	w.wake("e1", 6)
	require.True(t, woken(wt))
	w.wake("e1", -1)
	require.True(t, woken(wt), "a change without a revision always wakes")
}

// woken reports whether wt has a wakeup pending, and takes it.
func woken(wt *waiter) bool {
	select {
	case <-wt.ch:
		return true
	default:
		return false
	}
}

// A change heard while a look ran, and read by it, does not make the Get look again; a newer one,
// or one of unknown revision, does.
func TestWaiterSettlesWhatItsLookRead(t *testing.T) {
	t.Parallel()
	w := newWaiters()
	wt, remove := w.add("e1", "x", 0)
	defer remove()
	w.wake("e1", 5) // heard during the first look, which read revision 5
	wt.settle(5)
	require.False(t, woken(wt), "the look read revision 5")
	w.wake("e1", 6) // heard during the next look, which read revision 5 only
	wt.settle(5)
	require.True(t, woken(wt), "revision 6 is newer than the look")
	w.wake("e1", -1)
	wt.settle(7)
	require.True(t, woken(wt), "a change of unknown revision may be newer than any look")
}

// A write of this replica hands a waiter its node's value when the change is newer than the
// waiter's look and the newest it has heard of, and the value newer than it asks; else the Get
// reads.
func TestWaiterHandedTheCommittedValue(t *testing.T) {
	t.Parallel()
	at := time.Now()
	values := func(rev int64) graph.Values {
		return graph.Values{"y": {Raw: []byte(`"v"`), Revision: rev, SetAt: at}, "x": {Raw: []byte(`1`), Revision: 1}}
	}
	handed := func(wt *waiter) *graph.Value {
		require.True(t, woken(wt), "a change the waiter had not seen wakes it")
		return wt.handed.Load()
	}
	w := newWaiters()

	wt, remove := w.add("e1", "y", 0)
	w.Committed("e1", 3, values(3)) // committed while the look ran, which read it
	wt.settle(3)
	require.False(t, woken(wt), "the look read revision 3")
	require.Nil(t, wt.handed.Load())
	remove()

	wt, remove = w.add("e1", "y", 0)
	w.Committed("e1", 4, values(4)) // committed while the look ran, after its snapshot
	wt.settle(3)
	require.Equal(t, values(4)["y"], *handed(wt))
	remove()

	wt, remove = w.add("e1", "y", 0)
	wt.settle(3)
	w.Committed("e1", 3, values(3))
	require.False(t, woken(wt), "the look read revision 3")
	w.Committed("e1", 4, values(4))
	require.Equal(t, values(4)["y"], *handed(wt))
	w.wake("e1", 4) // the same change, heard from PostgreSQL
	require.Equal(t, values(4)["y"], *handed(wt), "the NOTIFY of the handed change keeps the value")
	w.wake("e1", 5)
	require.Nil(t, handed(wt), "a newer change the replica did not make: read it")
	w.Committed("e1", 4, values(4))
	require.Nil(t, handed(wt), "an older change does not hand its value over a newer one")
	w.Committed("e1", 5, values(5))
	require.Equal(t, values(5)["y"], *handed(wt), "the writer's hand of the change heard from PostgreSQL")
	w.Committed("e1", 6, graph.Values{"x": {Raw: []byte(`2`), Revision: 6}})
	require.Nil(t, handed(wt), "y has no value at revision 6")
	remove()

	wt, remove = w.add("e1", "y", 7) // a Get with WaitNewerThan of 7
	defer remove()
	wt.settle(8)
	w.Committed("e1", 9, values(7))
	require.Nil(t, handed(wt), "y's value is not newer than 7")
	w.Committed("e1", 10, values(10))
	require.Equal(t, int64(10), handed(wt).Revision)
}

// The NOTIFY of a change that a write of this replica is committing wakes no one: the writer
// hands the value over once it has committed, or, if the commit failed, wakes the waiters to look
// again, as the server may have committed it all the same.
func TestWaiterWokenByTheWriterOfItsChange(t *testing.T) {
	t.Parallel()
	w := newWaiters()
	wt, remove := w.add("e1", "y", 0)
	defer remove()
	wt.settle(3)
	w.Committing("e1", 4)
	w.wake("e1", 4)
	require.False(t, woken(wt), "the writer of revision 4 wakes it")
	v := graph.Value{Raw: []byte(`"v"`), Revision: 4}
	w.Committed("e1", 4, graph.Values{"y": v})
	require.Equal(t, v, *wt.handed.Load())
	require.True(t, woken(wt))

	w.Committing("e1", 5)
	w.Aborted("e1", 5)
	w.wake("e1", 5)
	require.True(t, woken(wt), "nothing is committing revision 5")
	require.Nil(t, wt.handed.Load())

	// The server committed revision 6 and sent its NOTIFY, but the client saw an error.
	w.Committing("e1", 6)
	w.wake("e1", 6)
	require.False(t, woken(wt), "the writer of revision 6 wakes it")
	w.Aborted("e1", 6)
	require.True(t, woken(wt), "the commit of revision 6 may have succeeded: look again")
	require.Nil(t, wt.handed.Load())

	w.Committing("e2", 1) // no one waits on e2: nothing to wait for
	wt2, remove2 := w.add("e2", "y", 0)
	defer remove2()
	wt2.settle(0)
	w.wake("e2", 1)
	require.True(t, woken(wt2))
	require.Empty(t, w.committing)
}
