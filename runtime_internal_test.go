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
	wt, remove := w.add("e1")
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
	wt, remove := w.add("e1")
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
