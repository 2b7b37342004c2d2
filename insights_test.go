package journey_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// funnelGraph: every execution signs up; some give an email, and some of those a code; verified
// runs on the email and the code, and fails for good on a code of "bad".
func funnelGraph() *graph.Graph {
	return graph.MustNew("funnel", "v1", []graph.Node{
		graph.Input("signup"),
		graph.Input("email"),
		graph.Input("code"),
		graph.Compute("verified", graph.Needs("email", "code"), func(ctx context.Context, in graph.Values) (any, error) {
			if in.String("code") == "bad" {
				return nil, graph.Permanent(errors.New("bad code"))
			}
			return true, nil
		}),
	})
}

// runFunnel runs 100 executions: 60 give an email, 35 of those a code, and 5 of those a bad one.
// Each input is its own write, so that the order of the values is the order of the steps. It
// returns the executions' ids in that order.
func runFunnel(ctx context.Context, t *testing.T, rt *journey.Runtime, g *graph.Graph) []string {
	t.Helper()
	ids := make([]string, 100)
	for i := range ids {
		ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"signup": i}))
		require.NoError(t, err)
		ids[i] = ex.ID
		if i >= 60 {
			continue
		}
		_, err = rt.Set(ctx, ex.ID, "email", "user@example.com")
		require.NoError(t, err)
		if i >= 35 {
			continue
		}
		code := "good"
		if i < 5 {
			code = "bad"
		}
		_, err = rt.Set(ctx, ex.ID, "code", code)
		require.NoError(t, err)
		_, err = rt.Get(ctx, ex.ID, "verified", journey.WaitAny())
		if i < 5 {
			require.ErrorIs(t, err, journey.ErrComputationFailed)
		} else {
			require.NoError(t, err)
		}
	}
	return ids
}

// upToDate reads the insights until the reading is up to date (Pending 0): a reading rolls what
// changed for a while and leaves the rest to the next, so how much one shows depends on the
// machine's speed (on Citus under CI's load, 300 ms is not always enough).
func upToDate(ctx context.Context, t *testing.T, rt *journey.Runtime, name string, opts journey.InsightsOptions) *journey.Insights {
	t.Helper()
	for {
		ins, err := rt.Insights(ctx, name, opts)
		require.NoError(t, err)
		if ins.Pending == 0 {
			return ins
		}
		require.NoError(t, ctx.Err(), "the insights of %s stayed %d minutes behind", name, ins.Pending)
	}
}

// A graph with a known drop-off gives exactly its numbers.
func TestInsightsFunnel(t *testing.T) {
	t.Parallel()
	g := funnelGraph()
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ids := runFunnel(ctx, t, rt, g)

	ins := upToDate(ctx, t, rt, "funnel", journey.InsightsOptions{IdleAfter: time.Nanosecond, Since: time.Hour})
	require.Equal(t, "funnel", ins.Graph)
	require.EqualValues(t, 100, ins.Executions)
	require.Positive(t, ins.ToLastValueP95)
	type row struct {
		node                                                  string
		kind                                                  graph.Kind
		reached                                               int64
		pct                                                   float64
		ends, failedForGood, attempts, failures, abandonments int64
	}
	var got []row
	for _, n := range ins.Nodes {
		got = append(got, row{n.Node, n.Kind, n.Reached, n.ReachedPct, n.EndsHere, n.FailedForGood, n.Attempts, n.Failures, n.Abandonments})
	}
	// The 5 bad codes end where they failed for good, at verified, not at their last value.
	require.Equal(t, []row{
		{"signup", graph.KindInput, 100, 100, 40, 0, 0, 0, 0},
		{"email", graph.KindInput, 60, 60, 25, 0, 0, 0, 0},
		{"code", graph.KindInput, 35, 35, 0, 0, 0, 0, 0},
		{"verified", graph.KindCompute, 30, 30, 35, 5, 35, 5, 0},
	}, got)
	require.Positive(t, ins.Nodes[3].RunP95)
	require.LessOrEqual(t, ins.Nodes[1].ToReachP50, ins.Nodes[3].ToReachP50, "email comes before verified")

	// The series: an hour in 5-minute buckets, all the work in the last.
	require.Len(t, ins.Series, 12)
	var started, succeeded, failed, failedForGood int64
	for _, p := range ins.Series {
		started, succeeded, failed, failedForGood = started+p.Started, succeeded+p.Succeeded, failed+p.Failed, failedForGood+p.FailedForGood
	}
	require.Equal(t, []int64{100, 30, 5, 5}, []int64{started, succeeded, failed, failedForGood})
	require.EqualValues(t, 5, ins.Series[11].FailedForGood)
	require.EqualValues(t, 100, ins.Series[11].Started)

	// Nothing ends at its last value while it is not idle, but a failure ends at once; archived
	// executions are another scope, and bad options are refused.
	ins = upToDate(ctx, t, rt, "funnel", journey.InsightsOptions{})
	require.EqualValues(t, 5, ins.Nodes[0].EndsHere+ins.Nodes[1].EndsHere+ins.Nodes[2].EndsHere+ins.Nodes[3].EndsHere)
	require.EqualValues(t, 5, ins.Nodes[3].EndsHere)
	require.Zero(t, upToDate(ctx, t, rt, "funnel", journey.InsightsOptions{Scope: journey.ScopeArchived}).Executions)

	// What changes later reaches the answer: an email unset where the flow ended, ten executions
	// archived, one more started.
	_, err := rt.Unset(ctx, ids[59], "email")
	require.NoError(t, err)
	for _, id := range ids[90:] {
		require.NoError(t, rt.Archive(ctx, id))
	}
	_, err = rt.Start(ctx, g)
	require.NoError(t, err)
	reached := func(scope journey.Scope) []int64 {
		ins := upToDate(ctx, t, rt, "funnel", journey.InsightsOptions{IdleAfter: time.Nanosecond, Scope: scope})
		out := []int64{ins.Executions}
		for _, n := range ins.Nodes {
			out = append(out, n.Reached, n.EndsHere)
		}
		return out
	}
	require.Equal(t, []int64{91, 90, 40 - 10 + 1, 59, 25 - 1, 35, 0, 30, 35}, reached(journey.ScopeActive))
	require.Equal(t, []int64{10, 10, 10, 0, 0, 0, 0, 0, 0}, reached(journey.ScopeArchived))
	require.Equal(t, []int64{101, 100, 41, 59, 24, 35, 0, 30, 35}, reached(journey.ScopeAll))

	_, err = rt.Insights(ctx, "nope", journey.InsightsOptions{})
	require.ErrorIs(t, err, journey.ErrUnknownGraph)
	_, err = rt.Insights(ctx, "funnel", journey.InsightsOptions{Since: -time.Hour})
	require.ErrorContains(t, err, "insights need a positive window, bucket and idle time")
	_, err = rt.Insights(ctx, "funnel", journey.InsightsOptions{Bucket: -time.Minute})
	require.ErrorContains(t, err, "positive window, bucket")
	_, err = rt.Insights(ctx, "funnel", journey.InsightsOptions{Since: math.MaxInt64})
	require.ErrorContains(t, err, "an insights window or bucket is 100 years (876000h0m0s) at most")
	_, err = rt.Insights(ctx, "funnel", journey.InsightsOptions{Since: time.Hour, Bucket: math.MaxInt64 / time.Minute * time.Minute})
	require.ErrorContains(t, err, "an insights window or bucket is 100 years (876000h0m0s) at most")
}
