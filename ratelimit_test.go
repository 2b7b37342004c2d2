package journey_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
)

// starts returns the claim times of every attempt of node in the executions ids, failed and
// replaced ones included, by the key that key gives each execution's index, and how many
// attempts succeeded.
func starts(t *testing.T, rt *journey.Runtime, ids []string, node string, key func(i int) string) (map[string][]time.Time, int) {
	t.Helper()
	out, succeeded := map[string][]time.Time{}, 0
	for i, id := range ids {
		comps, err := rt.Computations(context.Background(), id)
		require.NoError(t, err)
		for _, c := range comps {
			if c.Node != node {
				continue
			}
			if c.ClaimedAt != nil {
				out[key(i)] = append(out[key(i)], *c.ClaimedAt)
			}
			if c.State == journey.StateSuccess {
				succeeded++
			}
		}
	}
	for _, s := range out {
		slices.SortFunc(s, time.Time.Compare)
	}
	return out, succeeded
}

// requireWindows fails if any window of length per, sliding over the starts, holds more than n of
// them: the (i+n)th start must come at least per after the ith.
func requireWindows(t *testing.T, starts []time.Time, n int, per time.Duration) {
	t.Helper()
	for i := 0; i+n < len(starts); i++ {
		require.GreaterOrEqual(t, starts[i+n].Sub(starts[i]), per,
			"starts %d and %d of %d are %v apart: %d starts within %v, over the limit of %d",
			i, i+n, len(starts), starts[i+n].Sub(starts[i]), n+1, per, n)
	}
}

// Two replicas run a node limited to 2 starts in any 300 ms, on the wall clock, over 12
// executions whose first attempts half fail and are retried: no window holds more than 2 starts,
// retries and replaced attempts counted, and every execution completes.
func TestRateLimitAcrossReplicas(t *testing.T) {
	t.Parallel()
	const n, per, runs = 2, 300 * time.Millisecond, 12
	var failed sync.Map
	g := graph.MustNew("rated", "v1", []graph.Node{
		graph.Input("k"),
		graph.Compute("job", graph.Needs("k"), func(ctx context.Context, in graph.Values) (any, error) {
			if k := in.String("k"); len(k)%2 == 0 {
				if _, again := failed.LoadOrStore(k, true); !again {
					return nil, errors.New("the first call fails, and is retried")
				}
			}
			return "ok", nil
		}, graph.RateLimit(n, per), graph.MaxAttempts(2), graph.Backoff(func(int) time.Duration { return 0 })),
	})
	cfg := testConfig(t, g)
	a := newRuntime(t, cfg)
	cfg.ReplicaID = "second"
	b := newRuntime(t, cfg)

	began := time.Now()
	ids := make([]string, runs)
	rts := []*journey.Runtime{a, b}
	for i := range runs {
		ex, err := rts[i%2].Start(testCtx(t), g, journey.WithValues(map[string]any{"k": fmt.Sprint(i * 7)}))
		require.NoError(t, err)
		ids[i] = ex.ID
	}
	for i, id := range ids {
		_, err := rts[(i+1)%2].Get(testCtx(t), id, "job", journey.WaitAny())
		require.NoError(t, err)
	}
	all, succeeded := starts(t, a, ids, "job", func(int) string { return "" })
	require.Equal(t, runs, succeeded)
	require.Greater(t, len(all[""]), runs, "some first attempts failed and were retried")
	requireWindows(t, all[""], n, per)
	t.Logf("%d starts in %v", len(all[""]), time.Since(began))
}

// On a stub clock that moves only when told, a node limited per key to 3 starts a minute starts 3
// attempts of each of two keys, 6 in all, at once, and no more until the clock moves on by the
// minute; then 3 more of each. Every key's windows hold at most 3 starts.
func TestRateKeyAcrossReplicas(t *testing.T) {
	t.Parallel()
	const n, per, runs = 3, time.Minute, 16 // 8 executions a key: 3 steps of the clock
	stub := clock.NewStub(time.Now().Truncate(time.Millisecond))
	g := graph.MustNew("rated_keys", "v1", []graph.Node{
		graph.Input("account"),
		graph.Compute("call", graph.Needs("account"), func(ctx context.Context, in graph.Values) (any, error) {
			return "ok", nil
		}, graph.RateLimit(n, per, graph.RateKey(func(in graph.Values) string { return in.String("account") }))),
	})
	cfg := testConfig(t, g)
	cfg.Test.Clock = stub
	// A step of the clock makes the other replica's last heartbeat a minute old until it writes
	// the next; the replicas must not take each other for dead meanwhile.
	cfg.ReplicaStaleAfter = 10 * time.Minute
	a := newRuntime(t, cfg)
	cfg.ReplicaID = "second"
	b := newRuntime(t, cfg)

	account := func(i int) string { return []string{"acme", "globex"}[i%2] }
	ids := make([]string, runs)
	rts := []*journey.Runtime{a, b}
	for i := range runs {
		ex, err := rts[i%2].Start(testCtx(t), g, journey.WithValues(map[string]any{"account": account(i)}))
		require.NoError(t, err)
		ids[i] = ex.ID
	}
	for step := 1; step <= 3; step++ {
		want := min(step*n, runs/2)
		// The clock moves only once the started attempts have ended: a minute's step passes the
		// heartbeat deadline of an attempt still running, and the sweeper would run it again.
		waitFor(t, fmt.Sprintf("%d starts of each key at step %d, ended", want, step), func() bool {
			got, succeeded := starts(t, a, ids, "call", account)
			return len(got["acme"]) >= want && len(got["globex"]) >= want && succeeded >= 2*want
		})
		got, _ := starts(t, a, ids, "call", account)
		require.Len(t, got["acme"], want, "no more starts than the window allows, until the clock moves")
		require.Len(t, got["globex"], want, "each key has a window of its own")
		stub.Advance(per)
	}
	for i, id := range ids {
		_, err := rts[(i+1)%2].Get(testCtx(t), id, "call", journey.WaitAny())
		require.NoError(t, err)
	}
	got, succeeded := starts(t, a, ids, "call", account)
	require.Equal(t, runs, succeeded)
	for _, k := range []string{"acme", "globex"} {
		requireWindows(t, got[k], n, per)
		require.Equal(t, got[k][0], got[k][n-1], "the first %d starts of %s came at one instant of the stub", n, k)
	}
}
