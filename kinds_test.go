package journey_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/actors"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
	"github.com/journey-go/journey/persistence"
)

func TestUselessMachine(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("useless", "v1", []graph.Node{
		graph.Input("switch"),
		graph.Mutate("turn_off", graph.When("switch", func(v graph.Value) bool { return v.String() == "on" }),
			func(ctx context.Context, in graph.Values) (any, error) { return "off", nil }, []string{"switch"}),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)

	for round := range 3 {
		rev, err := rt.Set(ctx, ex.ID, "switch", "on")
		require.NoError(t, err)
		waitFor(t, "the switch to be turned off", func() bool {
			v, err := rt.Get(ctx, ex.ID, "switch")
			return err == nil && v.String() == "off"
		})
		v, err := rt.Get(ctx, ex.ID, "switch")
		require.NoError(t, err)
		require.Equal(t, rev, v.Revision, "round %d: a mutate keeps its target's revision by default", round)
		require.Len(t, attempts(t, rt, ex.ID, "turn_off"), round+1, "one mutation per switch-on")
		waitIdle(t, rt, ex.ID)
	}
}

func TestMutateRevisionOptions(t *testing.T) {
	t.Parallel()
	for _, bump := range []bool{false, true} {
		var downstream atomic.Int64
		opts := []graph.NodeOption{}
		if bump {
			opts = append(opts, graph.UpdateRevisionOnChange())
		}
		g := graph.MustNew("mutate", "v1", []graph.Node{
			graph.Input("a"),
			graph.Input("target"),
			graph.Mutate("m", graph.Needs("a"), func(ctx context.Context, in graph.Values) (any, error) {
				return in.Int("a") / 10, nil
			}, []string{"target"}, opts...),
			graph.Compute("d", graph.Needs("target"), func(ctx context.Context, in graph.Values) (any, error) {
				downstream.Add(1)
				return in.Int("target"), nil
			}),
		})
		rt := newRuntime(t, testConfig(t, g))
		ctx := testCtx(t)
		ex, err := rt.Start(ctx, g)
		require.NoError(t, err)
		_, err = rt.Set(ctx, ex.ID, "target", 1)
		require.NoError(t, err)
		d, err := rt.Get(ctx, ex.ID, "d", journey.WaitAny())
		require.NoError(t, err)

		_, err = rt.Set(ctx, ex.ID, "a", 50) // the mutate writes 5 into target
		require.NoError(t, err)
		waitFor(t, "the mutation", func() bool {
			v, err := rt.Get(ctx, ex.ID, "target")
			return err == nil && v.Int() == 5
		})
		waitIdle(t, rt, ex.ID)
		if !bump {
			require.Equal(t, int64(1), downstream.Load(), "by default, nothing downstream reruns")
			continue
		}
		d2, err := rt.Get(ctx, ex.ID, "d", journey.WaitNewerThan(d.Revision))
		require.NoError(t, err)
		require.Equal(t, int64(5), d2.Int())
		require.Equal(t, int64(2), downstream.Load(), "a changed target reruns downstream")

		_, err = rt.Set(ctx, ex.ID, "a", 51) // the mutate writes 5 again: no change
		require.NoError(t, err)
		waitFor(t, "the second mutation", func() bool { return countStates(t, rt, ex.ID, "m")[journey.StateSuccess] == 2 })
		waitIdle(t, rt, ex.ID)
		require.Equal(t, int64(2), downstream.Load(), "an unchanged target reruns nothing")
	}
}

func TestTickOnce(t *testing.T) {
	t.Parallel()
	var due atomic.Int64
	var zeroCalls atomic.Int64
	g := graph.MustNew("tick_once", "v1", []graph.Node{
		graph.Input("go"),
		graph.TickOnce("timer", graph.Needs("go"), func(ctx context.Context, in graph.Values) (time.Time, error) {
			// About wall-clock time: the tick comes due on the real clock, which the database's
			// now() and the downstream function read too. Only the order of the times is checked.
			at := time.Now().Add(300 * time.Millisecond)
			due.Store(at.UnixMilli())
			return at, nil
		}),
		graph.Compute("after", graph.Needs("timer"), func(ctx context.Context, in graph.Values) (any, error) {
			return time.Now().UnixMilli(), nil
		}),
		graph.TickOnce("never", graph.Needs("go"), func(ctx context.Context, in graph.Values) (time.Time, error) {
			zeroCalls.Add(1)
			return time.Time{}, nil
		}),
		graph.Compute("after_never", graph.Needs("never"), func(ctx context.Context, in graph.Values) (any, error) {
			return "ran", nil
		}),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "go", true)
	require.NoError(t, err)

	v, err := rt.Get(ctx, ex.ID, "after", journey.WaitAny())
	require.NoError(t, err)
	require.GreaterOrEqual(t, v.Int(), due.Load(), "downstream ran after the tick was due, not before")

	waitIdle(t, rt, ex.ID)
	_, err = rt.Get(ctx, ex.ID, "after_never")
	require.ErrorIs(t, err, journey.ErrNotSet, "the zero time keeps downstream unset")
	require.Empty(t, attempts(t, rt, ex.ID, "after_never"))
	require.Equal(t, int64(1), zeroCalls.Load())
}

func TestTickRecurringCountsPausesAndResumes(t *testing.T) {
	t.Parallel()
	// Time is the stub's: a period passes when the test moves the clock. A period is short next to
	// the default deadlines, so moving the clock abandons nothing that is running.
	const period = time.Second
	stub := clock.NewStub(time.Now())
	g := graph.MustNew("tick_recurring", "v1", []graph.Node{
		graph.Input("run"),
		graph.TickRecurring("clock", graph.Needs("run"), func(ctx context.Context, in graph.Values) (time.Time, error) {
			if !in.Bool("run") {
				return time.Time{}, nil // pause
			}
			return stub.Now().Add(period), nil
		}),
		graph.Compute("count", graph.Needs("clock"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.Int("count") + 1, nil // its own previous value is among the inputs
		}),
	})
	cfg := testConfig(t, g)
	cfg.Test.Clock = stub
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	// witness ticks beside ex and is never paused: when its counter moves, the sweeper has seen
	// the clock's new time, and would have fired ex's tick too, had it been due.
	var ex, witness string
	for _, id := range []*string{&ex, &witness} {
		e, err := rt.Start(ctx, g)
		require.NoError(t, err)
		*id = e.ID
		_, err = rt.Set(ctx, e.ID, "run", true)
		require.NoError(t, err)
	}
	count := func(id string) graph.Value {
		v, err := rt.Get(ctx, id, "count")
		if errors.Is(err, journey.ErrNotSet) {
			return graph.Value{}
		}
		require.NoError(t, err)
		return v
	}
	// nextPeriod lets the executions settle, so that each tick has chosen its next due time, then
	// moves the clock by one period and waits for the counter of id to move.
	nextPeriod := func(id string) graph.Value {
		t.Helper()
		waitIdle(t, rt, ex)
		waitIdle(t, rt, witness)
		before := count(id)
		now := stub.Advance(period)
		wait, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		v, err := rt.Get(wait, id, "count", journey.WaitNewerThan(before.Revision))
		require.NoError(t, err, "the counter of %s, at %d, did not move once the clock reached %v", id, before.Int(), now)
		return v
	}

	for want := int64(1); want <= 3; want++ {
		require.Equal(t, want, nextPeriod(ex).Int(), "the counter advances once per period")
	}

	_, err := rt.Set(ctx, ex, "run", false)
	require.NoError(t, err)
	waitFor(t, "the tick to pause", func() bool {
		v, err := rt.Get(ctx, ex, "clock")
		return err == nil && v.Int() == 0
	})
	paused := count(ex)
	require.Equal(t, int64(3), paused.Int(), "a paused tick does not clear downstream values")
	for range 3 {
		nextPeriod(witness)
	}
	still := count(ex)
	require.Equal(t, paused.Int(), still.Int(), "no count while paused")
	require.Equal(t, paused.Revision, still.Revision)

	_, err = rt.Set(ctx, ex, "run", true)
	require.NoError(t, err)
	require.Equal(t, still.Int()+1, nextPeriod(ex).Int(), "the count resumes where it paused")
}

// A node downstream of a recurring tick runs once per cycle, even when it reads its inputs after
// the tick's next cycle was written and before that cycle came due: the hooks force that order.
func TestDownstreamOfARecurringTickRunsEveryCycle(t *testing.T) {
	t.Parallel()
	const period = time.Second
	stub := clock.NewStub(time.Now())
	g := graph.MustNew("tick_every_cycle", "v1", []graph.Node{
		graph.Input("run"),
		graph.TickRecurring("clock", graph.Needs("run"), func(ctx context.Context, in graph.Values) (time.Time, error) {
			return stub.Now().Add(period), nil
		}),
		graph.Compute("count", graph.Needs("clock"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.Int("count") + 1, nil
		}),
	})
	ticked := make(chan struct{}, 10)
	cfg := testConfig(t, g)
	cfg.Test.Clock = stub
	cfg.Test.Hooks = actors.Hooks{
		ComputationStarted: func(c *persistence.Computation, _, _ *actor.PID) {
			if c.Node == "count" {
				<-ticked // count reads its inputs once the tick's next cycle is written
			}
		},
		ComputationFinished: func(c *persistence.Computation, _ string) {
			if c.Node == "clock" {
				ticked <- struct{}{}
			}
		},
	}
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "run", true)
	require.NoError(t, err)
	waitFor(t, "the first cycle", func() bool { _, err := rt.Get(ctx, ex.ID, "clock"); return err == nil })
	waitIdle(t, rt, ex.ID)
	<-ticked // the first cycle's, which no count waited for

	var last graph.Value
	for want := int64(1); want <= 3; want++ {
		waitIdle(t, rt, ex.ID)
		stub.Advance(period)
		last, err = rt.Get(ctx, ex.ID, "count", journey.WaitNewerThan(last.Revision))
		require.NoError(t, err, "cycle %d: count did not run", want)
		require.Equal(t, want, last.Int())
	}
}

func TestTickRunsOncePerUpstreamChange(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	g := graph.MustNew("tick_once_only", "v1", []graph.Node{
		graph.Input("x"),
		graph.Input("noise"),
		graph.TickOnce("t", graph.Needs("x"), func(ctx context.Context, in graph.Values) (time.Time, error) {
			calls.Add(1)
			return time.Now().Add(time.Hour), nil
		}),
	})
	cfg := testConfig(t, g)
	a := newRuntime(t, cfg)
	cfg.ReplicaID = "second"
	b := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := a.Start(ctx, g)
	require.NoError(t, err)
	_, err = a.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range 10 { // ten concurrent advances, from two replicas
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := []*journey.Runtime{a, b}[i%2].Set(ctx, ex.ID, "noise", i)
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	_, err = a.Get(ctx, ex.ID, "t", journey.WaitAny())
	require.NoError(t, err)
	waitIdle(t, a, ex.ID)
	require.Equal(t, int64(1), calls.Load(), "the tick function ran once")
}

func TestHistorian(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("historian", "v1", []graph.Node{
		graph.Input("a"),
		graph.Historian("h", graph.Needs("a"), graph.MaxEntries(2)),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	for i := 1; i <= 3; i++ {
		_, err = rt.Set(ctx, ex.ID, "a", i, journey.WithMetadata(map[string]int{"i": i}))
		require.NoError(t, err)
	}
	type entry struct {
		Node     string          `json:"node"`
		Value    json.RawMessage `json:"value"`
		Metadata json.RawMessage `json:"metadata"`
		Revision int64           `json:"revision"`
		At       time.Time       `json:"at"`
	}
	read := func() []entry {
		var es []entry
		v, err := rt.Get(ctx, ex.ID, "h")
		require.NoError(t, err)
		require.NoError(t, v.Decode(&es))
		return es
	}
	es := read()
	require.Len(t, es, 2, "MaxEntries(2) keeps the last two")
	require.JSONEq(t, "3", string(es[0].Value), "newest first")
	require.JSONEq(t, "2", string(es[1].Value))
	require.Equal(t, "a", es[0].Node)
	require.JSONEq(t, `{"i":3}`, string(es[0].Metadata))
	require.Greater(t, es[0].Revision, es[1].Revision)

	_, err = rt.Unset(ctx, ex.ID, "a")
	require.NoError(t, err)
	require.Equal(t, es, read(), "invalidation never clears a historian")
}

func TestArchive(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("archiving", "v1", []graph.Node{
		graph.Input("done"),
		graph.Archive("archive", graph.Needs("done")),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	other, err := rt.Start(ctx, g)
	require.NoError(t, err)
	q := journey.ListQuery{Graph: "archiving"}
	n, err := rt.Count(ctx, q)
	require.NoError(t, err)
	require.Equal(t, int64(2), n)

	_, err = rt.Set(ctx, ex.ID, "done", true)
	require.NoError(t, err)
	_, err = rt.Load(ctx, ex.ID)
	require.ErrorIs(t, err, journey.ErrNotFound, "an archived execution is not loaded")
	e, err := rt.Load(ctx, ex.ID, journey.IncludeArchived())
	require.NoError(t, err)
	require.NotNil(t, e.ArchivedAt)
	list, err := rt.List(ctx, q)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, other.ID, list[0].ID, "List excludes it")
	n, err = rt.Count(ctx, journey.ListQuery{Graph: "archiving", IncludeArchived: true})
	require.NoError(t, err)
	require.Equal(t, int64(2), n)

	require.NoError(t, rt.Unarchive(ctx, ex.ID))
	_, err = rt.Load(ctx, ex.ID)
	require.NoError(t, err, "Unarchive brings it back")
	list, err = rt.List(ctx, q)
	require.NoError(t, err)
	require.Len(t, list, 2)

	require.NoError(t, rt.Archive(ctx, other.ID))
	_, err = rt.Load(ctx, other.ID)
	require.ErrorIs(t, err, journey.ErrNotFound)
}

func TestRetryGivesAFreshBudget(t *testing.T) {
	t.Parallel()
	var fixed atomic.Bool
	var calls atomic.Int64
	g := graph.MustNew("retry", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			calls.Add(1)
			if !fixed.Load() {
				return nil, context.DeadlineExceeded
			}
			return "fixed", nil
		}, graph.MaxAttempts(2), graph.Backoff(fastBackoff)),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	require.Error(t, rt.Retry(ctx, ex.ID, "y"), "nothing has failed yet")
	_, err = rt.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)
	_, err = rt.Get(ctx, ex.ID, "y", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)
	require.Equal(t, int64(2), calls.Load())

	fixed.Store(true)
	require.NoError(t, rt.Retry(ctx, ex.ID, "y"))
	v, err := rt.Get(ctx, ex.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, "fixed", v.String())
	got := attempts(t, rt, ex.ID, "y")
	require.Len(t, got, 3)
	require.Equal(t, 1, got[2].Attempt, "a fresh budget")

	hist, err := rt.History(ctx, ex.ID)
	require.NoError(t, err)
	require.Len(t, hist, 2)
	require.Equal(t, "x", hist[0].Node)
	require.Equal(t, "y", hist[1].Node)
	require.JSONEq(t, `"fixed"`, string(hist[1].Value))
}

// History lists every change of every value, oldest first: the values replaced and cleared, the
// clearings, and the values that stand, each at its revision.
func TestHistoryListsEveryChange(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("history", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.Int("x") + 1, nil
		}),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	setAndWait := func(x int) {
		rev, err := rt.Set(ctx, ex.ID, "x", x)
		require.NoError(t, err)
		_, err = rt.Get(ctx, ex.ID, "y", journey.WaitNewerThan(rev))
		require.NoError(t, err)
	}
	setAndWait(1)
	setAndWait(2)
	_, err = rt.Unset(ctx, ex.ID, "x")
	require.NoError(t, err)
	setAndWait(3)

	hist, err := rt.History(ctx, ex.ID)
	require.NoError(t, err)
	var got []string
	for i, h := range hist {
		got = append(got, h.Node+"="+string(h.Value))
		if i > 0 {
			require.Greater(t, h.Revision, hist[i-1].Revision, "oldest first")
		}
	}
	require.Equal(t, []string{"x=1", "y=2", "x=2", "y=3", "x=", "y=", "x=3", "y=4"}, got)
	vals, err := rt.Values(ctx, ex.ID)
	require.NoError(t, err)
	require.Equal(t, vals["y"].Revision, hist[len(hist)-1].Revision, "the last entry is the value that stands")
}
