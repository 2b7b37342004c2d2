package journey_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

func TestChainRecomputes(t *testing.T) {
	t.Parallel()
	var bCalls, cCalls atomic.Int64
	g := graph.MustNew("chain", "v1", []graph.Node{
		graph.Input("a"),
		graph.Compute("b", graph.Needs("a"), func(ctx context.Context, in graph.Values) (any, error) {
			bCalls.Add(1)
			return in.Int("a") / 10, nil
		}),
		graph.Compute("c", graph.Needs("b"), func(ctx context.Context, in graph.Values) (any, error) {
			cCalls.Add(1)
			return in.Int("b") * 2, nil
		}),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)

	rev, err := rt.Set(ctx, ex.ID, "a", 1)
	require.NoError(t, err)
	require.Equal(t, int64(1), rev)
	c, err := rt.Get(ctx, ex.ID, "c", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, int64(0), c.Int())
	b, err := rt.Get(ctx, ex.ID, "b")
	require.NoError(t, err)
	require.Equal(t, int64(3), b.Revision, "b lands at 3: set 1, claim 2, completion 3")
	require.Equal(t, int64(5), c.Revision, "c lands at 5")

	// a changes, but b's result does not: b keeps its revision and c does not rerun.
	_, err = rt.Set(ctx, ex.ID, "a", 5)
	require.NoError(t, err)
	waitFor(t, "b's second success", func() bool { return countStates(t, rt, ex.ID, "b")[journey.StateSuccess] == 2 })
	b2, err := rt.Get(ctx, ex.ID, "b")
	require.NoError(t, err)
	require.Equal(t, b.Revision, b2.Revision, "an unchanged recomputation keeps its revision")
	require.Equal(t, int64(2), bCalls.Load())
	require.Equal(t, int64(1), cCalls.Load(), "c must not rerun when b did not change")
	require.Len(t, attempts(t, rt, ex.ID, "c"), 1)

	// a changes so that b does: c reruns.
	_, err = rt.Set(ctx, ex.ID, "a", 25)
	require.NoError(t, err)
	c3, err := rt.Get(ctx, ex.ID, "c", journey.WaitNewerThan(c.Revision))
	require.NoError(t, err)
	require.Equal(t, int64(4), c3.Int())
	require.Equal(t, int64(2), cCalls.Load())
}

func TestInvalidation(t *testing.T) {
	t.Parallel()
	echo := func(ctx context.Context, in graph.Values) (any, error) { return "computed", nil }
	g := graph.MustNew("invalidation", "v1", []graph.Node{
		graph.Input("a"),
		graph.Input("b"),
		graph.Input("flag"),
		graph.Compute("either", graph.Or(graph.Provided("a"), graph.Provided("b")), echo),
		graph.Compute("no_flag", graph.Not(graph.Provided("flag")), echo),
		graph.Compute("after_either", graph.Needs("either"), echo),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)

	// not(provided(flag)) computes at start, and is cleared once flag is set.
	_, err = rt.Get(ctx, ex.ID, "no_flag", journey.WaitAny())
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "flag", true)
	require.NoError(t, err)
	_, err = rt.Get(ctx, ex.ID, "no_flag")
	require.ErrorIs(t, err, journey.ErrNotSet, "no_flag is cleared in the same transaction as the set")

	// or(a, b) holds while either is set; the cascade clears what depends on it.
	_, err = rt.Set(ctx, ex.ID, "a", 1)
	require.NoError(t, err)
	_, err = rt.Get(ctx, ex.ID, "after_either", journey.WaitAny())
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "b", 2)
	require.NoError(t, err)
	_, err = rt.Unset(ctx, ex.ID, "a")
	require.NoError(t, err)
	_, err = rt.Get(ctx, ex.ID, "either")
	require.NoError(t, err, "b still holds the or")
	waitIdle(t, rt, ex.ID)
	before, err := rt.Load(ctx, ex.ID)
	require.NoError(t, err)
	rev, err := rt.Unset(ctx, ex.ID, "b")
	require.NoError(t, err)
	require.Equal(t, before.Revision+3, rev, "one revision for the unset, one per cleared value")
	vals, err := rt.Values(ctx, ex.ID)
	require.NoError(t, err)
	require.False(t, vals.Has("either"))
	require.False(t, vals.Has("after_either"), "invalidation cascades")

	// unsetting flag makes no_flag hold again: it recomputes.
	_, err = rt.Unset(ctx, ex.ID, "flag")
	require.NoError(t, err)
	_, err = rt.Get(ctx, ex.ID, "no_flag", journey.WaitAny())
	require.NoError(t, err)
}

func TestRetries(t *testing.T) {
	t.Parallel()
	var always, flaky, permanent atomic.Int64
	g := graph.MustNew("retries", "v1", []graph.Node{
		graph.Input("go"),
		graph.Compute("always", graph.Needs("go"), func(ctx context.Context, in graph.Values) (any, error) {
			return nil, fmt.Errorf("boom %d", always.Add(1))
		}, graph.MaxAttempts(2), graph.Backoff(fastBackoff)),
		graph.Compute("flaky", graph.Needs("go"), func(ctx context.Context, in graph.Values) (any, error) {
			if flaky.Add(1) == 1 {
				return nil, errors.New("transient")
			}
			return "ok", nil
		}, graph.Backoff(fastBackoff)),
		graph.Compute("permanent", graph.Needs("go"), func(ctx context.Context, in graph.Values) (any, error) {
			permanent.Add(1)
			return nil, graph.Permanent(errors.New("bad input"))
		}, graph.MaxAttempts(5), graph.Backoff(fastBackoff)),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "go", true)
	require.NoError(t, err)

	_, err = rt.Get(ctx, ex.ID, "always", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)
	require.Contains(t, err.Error(), "boom 2")
	require.Equal(t, int64(2), always.Load(), "MaxAttempts(2) runs exactly twice")
	got := attempts(t, rt, ex.ID, "always")
	require.Len(t, got, 2)
	for i, c := range got {
		require.Equal(t, i+1, c.Attempt)
		require.Equal(t, journey.StateFailed, c.State)
	}

	v, err := rt.Get(ctx, ex.ID, "flaky", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, "ok", v.String())
	require.Equal(t, int64(2), flaky.Load())

	_, err = rt.Get(ctx, ex.ID, "permanent", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)
	require.Equal(t, int64(1), permanent.Load(), "a permanent error fails after one attempt")

	// A fresh upstream value gives a fresh budget.
	_, err = rt.Set(ctx, ex.ID, "go", "again")
	require.NoError(t, err)
	waitFor(t, "two more attempts of always", func() bool { return countStates(t, rt, ex.ID, "always")[journey.StateFailed] == 4 })
	require.Equal(t, int64(4), always.Load())

	summary, err := rt.Summarize(ctx, ex.ID)
	require.NoError(t, err)
	require.Contains(t, summary, "always attempt 2/2: FAILED (boom 4)")
}

// A node that fails for good says how: a graph.Permanent error at attempt 2 of 4 is not a budget
// used up. Get's error, OnSave and Summarize say so alike.
func TestFailureSaysHow(t *testing.T) {
	t.Parallel()
	var charges atomic.Int64
	saved := make(chan graph.SaveEvent, 1)
	g := graph.MustNew("failures", "v1", []graph.Node{
		graph.Input("go"),
		graph.Compute("charge", graph.Needs("go"), func(ctx context.Context, in graph.Values) (any, error) {
			if charges.Add(1) == 1 {
				return nil, errors.New("gateway timeout")
			}
			return nil, graph.Permanent(errors.New("card declined"))
		}, graph.MaxAttempts(4), graph.Backoff(fastBackoff),
			graph.OnSave(func(ctx context.Context, e graph.SaveEvent) { saved <- e })),
		graph.Compute("always", graph.Needs("go"), func(ctx context.Context, in graph.Values) (any, error) {
			return nil, errors.New("boom")
		}, graph.MaxAttempts(2), graph.Backoff(fastBackoff)),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"go": true}))
	require.NoError(t, err)

	_, err = rt.Get(ctx, ex.ID, "charge", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)
	require.EqualError(t, err, `journey: computation failed: node "charge" of `+ex.ID+
		` failed permanently at attempt 2 of 4: card declined`)
	select {
	case e := <-saved:
		require.EqualError(t, e.Err, `node "charge" failed permanently at attempt 2 of 4: card declined`)
	case <-ctx.Done():
		t.Fatal("OnSave did not fire")
	}
	_, err = rt.Get(ctx, ex.ID, "always", journey.WaitAny())
	require.EqualError(t, err, `journey: computation failed: node "always" of `+ex.ID+` used up its 2 attempts: boom`)

	summary, err := rt.Summarize(ctx, ex.ID)
	require.NoError(t, err)
	require.Contains(t, summary, "\n  charge: failed permanently at attempt 2 of 4; Retry gives it a fresh budget\n")
	require.Contains(t, summary, "\n  always: used up its 2 attempts; Retry gives it a fresh budget\n")
}

func TestSummarizeSaysWhatEachNodeWaitsFor(t *testing.T) {
	t.Parallel()
	g := onboardingGraph(t)
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "name", "Mario")
	require.NoError(t, err)
	s, err := rt.Summarize(ctx, ex.ID)
	require.NoError(t, err)
	require.Contains(t, s, `name = "Mario" (revision 1)`)
	require.Contains(t, s, "greeting:")
	require.Contains(t, s, `"email"`, "the greeting waits for email")
	require.NotContains(t, s, `"name" is`, "name is provided")
}

func TestOnSaveFiresOncePerOutcome(t *testing.T) {
	t.Parallel()
	events := make(chan graph.SaveEvent, 10)
	record := func(ctx context.Context, e graph.SaveEvent) { events <- e }
	var flaky atomic.Int64
	g := graph.MustNew("onsave", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("flaky", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			if flaky.Add(1) < 3 {
				return nil, errors.New("transient")
			}
			return "ok", nil
		}, graph.OnSave(record), graph.Backoff(fastBackoff)),
		graph.Compute("doomed", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return nil, errors.New("always")
		}, graph.OnSave(record), graph.MaxAttempts(2), graph.Backoff(fastBackoff)),
		graph.Compute("hung", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			<-ctx.Done() // until abandoned
			return nil, ctx.Err()
		}, graph.OnSave(record), graph.MaxAttempts(1), graph.AbandonAfter(200*time.Millisecond),
			graph.Heartbeat(50*time.Millisecond, 150*time.Millisecond)),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)
	_, err = rt.Get(ctx, ex.ID, "flaky", journey.WaitAny())
	require.NoError(t, err)
	_, err = rt.Get(ctx, ex.ID, "doomed", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)
	_, err = rt.Get(ctx, ex.ID, "hung", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)

	got := map[string][]graph.SaveEvent{}
	for range 3 {
		select {
		case e := <-events:
			got[e.Node] = append(got[e.Node], e)
		case <-ctx.Done():
			t.Fatal("OnSave did not fire")
		}
	}
	require.Len(t, got["flaky"], 1, "one success after transient failures")
	require.NoError(t, got["flaky"][0].Err)
	require.Equal(t, "ok", got["flaky"][0].Value.String())
	require.Len(t, got["doomed"], 1, "one error after exhaustion")
	require.ErrorContains(t, got["doomed"][0].Err, "always")
	require.Len(t, got["hung"], 1, "one error after abandonment")
	require.ErrorContains(t, got["hung"][0].Err, "timed out")
	require.NoError(t, rt.Stop(ctx)) // waits for the callbacks: no third event may follow
	require.Empty(t, events)
}

// records is a slog handler that hands each record, with its attributes, to a channel.
type records chan slog.Record

func (r records) Enabled(context.Context, slog.Level) bool { return true }
func (r records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r records) WithGroup(string) slog.Handler            { return r }
func (r records) Handle(_ context.Context, rec slog.Record) error {
	select {
	case r <- rec.Clone():
	default: // the test reads what it needs; the rest is dropped
	}
	return nil
}

// An attempt's log records carry the attempt's attributes, and the line that logged them.
func TestAttemptLogsSayWhichAttempt(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("logged", "v1", []graph.Node{
		graph.Input("go"),
		graph.Compute("fails", graph.Needs("go"), func(ctx context.Context, in graph.Values) (any, error) {
			return nil, graph.Permanent(errors.New("bad input"))
		}),
	})
	got := make(records, 1000)
	cfg := testConfig(t, g)
	cfg.Logger = slog.New(got)
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "go", true)
	require.NoError(t, err)
	for {
		var rec slog.Record
		select {
		case rec = <-got:
		case <-ctx.Done():
			t.Fatal("no record of the failed attempt")
		}
		if rec.Message != "attempt failed" {
			continue
		}
		attrs := map[string]string{}
		rec.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		require.Equal(t, "computation", attrs["service"])
		require.Equal(t, ex.ID, attrs["execution_id"])
		require.Equal(t, "fails", attrs["node"])
		require.Equal(t, "1", attrs["attempt"])
		require.NotEmpty(t, attrs["computation_id"])
		require.Contains(t, attrs["error"], "bad input")
		frame, _ := runtime.CallersFrames([]uintptr{rec.PC}).Next()
		require.True(t, strings.HasSuffix(frame.File, "actors/computation.go"), frame.File)
		require.NotEqual(t, "github.com/journey-go/journey/actors.(*computation).log", frame.Function)
		return
	}
}

// A waiting Get, woken by the replica's own write, returns what a read returns afterwards.
func TestWaitingGetReturnsWhatAReadReturns(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("handed", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return map[string]any{"x": in["x"].Raw}, nil
		}),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	for i := range 10 {
		ex, err := rt.Start(ctx, g)
		require.NoError(t, err)
		_, err = rt.Set(ctx, ex.ID, "x", i, journey.WithMetadata(map[string]int{"i": i}))
		require.NoError(t, err)
		waited, err := rt.Get(ctx, ex.ID, "y", journey.WaitAny())
		require.NoError(t, err)
		read, err := rt.Get(ctx, ex.ID, "y")
		require.NoError(t, err)
		require.Equal(t, read, waited)
		require.JSONEq(t, fmt.Sprintf(`{"x": %d}`, i), string(waited.Raw))

		// And a newer value, after the input changes.
		_, err = rt.Set(ctx, ex.ID, "x", i+100)
		require.NoError(t, err)
		waited, err = rt.Get(ctx, ex.ID, "y", journey.WaitNewerThan(read.Revision))
		require.NoError(t, err)
		read, err = rt.Get(ctx, ex.ID, "y")
		require.NoError(t, err)
		require.Equal(t, read, waited)
		require.JSONEq(t, fmt.Sprintf(`{"x": %d}`, i+100), string(waited.Raw))
	}
}

// A fan-out's siblings, recorded together or apart, each land at a revision of their own, and
// the node that needs them all runs once, on all their values.
func TestFanoutSiblingsLandAtRevisionsOfTheirOwn(t *testing.T) {
	t.Parallel()
	const width = 10
	nodes := fanoutGraph(width).Nodes()
	var fs []string
	for i := range width {
		fs = append(fs, fmt.Sprintf("f%d", i))
	}
	g := graph.MustNew("fanin", "v1", append(nodes, graph.Compute("sum", graph.Needs(fs...),
		func(ctx context.Context, in graph.Values) (any, error) {
			var sum int64
			for _, f := range fs {
				sum += in.Int(f)
			}
			return sum, nil
		})))
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	sum, err := rt.Get(ctx, ex.ID, "sum", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, int64(width+width*(width-1)/2), sum.Int())

	vals, err := rt.Values(ctx, ex.ID)
	require.NoError(t, err)
	revs := map[int64]string{}
	for _, f := range fs {
		rev := vals[f].Revision
		require.NotContains(t, revs, rev, "%s and %s share a revision", f, revs[rev])
		revs[rev] = f
		require.Less(t, rev, sum.Revision, "sum lands after %s", f)
	}
	sums := attempts(t, rt, ex.ID, "sum")
	require.Len(t, sums, 1)
	require.Equal(t, journey.StateSuccess, sums[0].State)
}
