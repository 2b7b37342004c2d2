//go:build linux

package chaos

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
)

// keyedStarts, for a worker with Keys, waits for SIGUSR1 once the worker is ready, then starts
// the chaos graph with each of the keys key-0 … key-(Keys-1), KeyedCallers times at once, key
// after key in an order of its replica's own (so that two replicas race for some keys, and not for
// others), and says "keyed <key> <id> <existing>" for each Start (or "keyed error …"), then "keyed done".
// Half the Starts set n, half set nothing: the two paths of a Start race. It registers for the
// signal at once, before the worker says it is ready. For a worker without Keys, it does nothing.
func keyedStarts(cfg workerConfig) func(ctx context.Context, rt *journey.Runtime) {
	if cfg.Keys == 0 {
		return func(context.Context, *journey.Runtime) {}
	}
	begin := make(chan os.Signal, 1)
	signal.Notify(begin, syscall.SIGUSR1)
	return func(ctx context.Context, rt *journey.Runtime) {
		select {
		case <-begin:
		case <-ctx.Done():
			return
		}
		g := chaosGraph(cfg)
		seed := fnv.New64a()
		_, _ = seed.Write([]byte(cfg.ReplicaID))
		for _, k := range rand.New(rand.NewPCG(seed.Sum64(), 0)).Perm(cfg.Keys) {
			var wg sync.WaitGroup
			for c := range cfg.KeyedCallers {
				wg.Go(func() {
					key := fmt.Sprintf("key-%d", k)
					var values map[string]any
					if c%2 == 0 {
						values = map[string]any{"n": k}
					}
					ex, err := rt.Start(ctx, g, journey.WithKey(key), journey.WithValues(values))
					if err != nil {
						say("keyed error %s %v", key, err)
						return
					}
					say("keyed %s %s %t", key, ex.ID, ex.Existing)
				})
			}
			wg.Wait()
		}
		say("keyed done")
	}
}

// Two replica processes that Start the same keys at the same moment, many times each, make one
// execution per key: every Start of a key, in either process, gets its id, and exactly one of
// them started it.
func TestKeyedStartsAcrossReplicaProcesses(t *testing.T) {
	cfg := defaults()
	cfg.WorkMin, cfg.WorkMax = 10, 20
	cfg.Keys, cfg.KeyedCallers = 20, 12
	c := newCluster(t, pgtest.URL(t), cfg)
	workers := []*worker{c.start(t, "w0"), c.start(t, "w1")}
	for _, w := range workers {
		w.signal(t, syscall.SIGUSR1)
	}
	ids, started := map[string]map[string]bool{}, map[string]int{}
	for _, w := range workers {
		mine := 0
		w.waitFor(t, "its keyed starts", func(w *worker) bool { return w.count("keyed done") > 0 })
		require.Zero(t, w.count("keyed error"), "worker %s: a Start failed", w.id)
		require.Equal(t, cfg.Keys*cfg.KeyedCallers, w.count("keyed key-"))
		w.mu.Lock()
		for _, l := range w.lines {
			var key, id string
			var existing bool
			if _, err := fmt.Sscanf(l, "keyed %s %s %t", &key, &id, &existing); err != nil || !strings.HasPrefix(key, "key-") {
				continue
			}
			if ids[key] == nil {
				ids[key] = map[string]bool{}
			}
			ids[key][id] = true
			if !existing {
				started[key]++
				mine++
			}
		}
		w.mu.Unlock()
		t.Logf("worker %s started the executions of %d of the %d keys", w.id, mine, cfg.Keys)
	}
	require.Len(t, ids, cfg.Keys)
	for key, got := range ids {
		require.Len(t, got, 1, "%s: every Start, in both processes, got the same execution", key)
		require.Equal(t, 1, started[key], "%s: exactly one Start started it", key)
		e, err := c.store.FindByKey(context.Background(), "chaos", key)
		require.NoError(t, err)
		require.True(t, got[e.ID], "%s: the database holds the execution the Starts got", key)
	}
	n, err := c.store.CountExecutions(context.Background(), persistence.ListQuery{IncludeArchived: true})
	require.NoError(t, err)
	require.EqualValues(t, cfg.Keys, n, "one execution per key, and no other")
}
