package journey

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// The work records outcomes on connections of its own: a pool that the callers hold in full
// does not keep the value a Get waits for from being recorded, and handed to it.
func TestOutcomesAreRecordedWhileThePoolIsFull(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	g := graph.MustNew("full-pool", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), xPlusOneOnceReleased(release)),
	})
	u, err := url.Parse(pgtest.URL(t))
	require.NoError(t, err)
	q := u.Query()
	q.Set("pool_max_conns", "2")
	u.RawQuery = q.Encode()
	rt := startRuntime(t, Config{DatabaseURL: u.String(), Schema: pgtest.Schema(t), Graphs: []*graph.Graph{g},
		PollInterval: 30 * time.Second, SweepInterval: time.Minute})
	var held []*pgxpool.Conn
	t.Cleanup(func() { // before the Stop: cleanups run last first
		for _, c := range held {
			c.Release()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)
	got := make(chan error, 1)
	var v graph.Value
	gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
	defer gcancel()
	go func() {
		var err error
		v, err = rt.Get(gctx, ex.ID, "y", WaitAny())
		got <- err
	}()
	for !getWaits(rt.waiters, ex.ID) {
		select {
		case <-ctx.Done():
			t.Fatal("the Get never waited")
		case <-time.After(5 * time.Millisecond):
		}
	}
	for range rt.pool.Config().MaxConns {
		c, err := rt.pool.Acquire(ctx)
		require.NoError(t, err)
		held = append(held, c)
	}
	close(release)
	require.NoError(t, <-got, "the outcome was recorded, and handed to the Get")
	require.Equal(t, int64(2), v.Int())
}
