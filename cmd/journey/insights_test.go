package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// journey insights -json gives the numbers of Runtime.Insights, in its own shape; the table draws
// the funnel.
func TestInsightsCommand(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	g := graph.MustNew("funnel", "v1", []graph.Node{
		graph.Input("signup"),
		graph.Input("email"),
		graph.Compute("verified", graph.Needs("email"), func(ctx context.Context, in graph.Values) (any, error) {
			if in.String("email") == "bad" {
				return nil, graph.Permanent(errors.New("bad email"))
			}
			return true, nil
		}),
	})
	rt := startRuntime(t, journey.Config{DatabaseURL: url, Schema: schema, Graphs: []*graph.Graph{g},
		PollInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ctx := t.Context()
	for i := range 10 { // 10 sign up, 4 give an email, 1 of them a bad one
		ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"signup": i}))
		require.NoError(t, err)
		if i < 4 {
			email := "good"
			if i == 0 {
				email = "bad"
			}
			_, err = rt.Set(ctx, ex.ID, "email", email)
			require.NoError(t, err)
			_, err = rt.Get(ctx, ex.ID, "verified", journey.WaitAny())
			require.Equal(t, i == 0, errors.Is(err, journey.ErrComputationFailed), "%v", err)
		}
	}
	// A reading rolls what changed for a while and leaves the rest to the next (Pending): on a
	// busy machine, the first may not be up to date.
	var want *journey.Insights
	for want == nil || want.Pending > 0 {
		var err error
		want, err = rt.Insights(ctx, "funnel", journey.InsightsOptions{IdleAfter: time.Nanosecond})
		require.NoError(t, err)
	}

	// The replica's sweeper rolls the insights in the background too: a minute it holds as the
	// command rolls is pending for the command (two, if the executions straddle a minute), and the
	// command reads again, as a user would, until it is up to date.
	var got insightsJSON
	var code int
	var stdout, stderr string
	for first := true; first || got.PendingMinutes > 0; first = false {
		code, stdout, stderr = runAs(t, url, "insights", "funnel", "-schema", schema, "-idle-after", "1ns", "-json")
		require.Equal(t, 0, code, stderr)
		got = insightsJSON{}
		require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	}
	require.Equal(t, toInsightsJSON(want), got)
	require.EqualValues(t, 10, got.Executions)
	type row struct {
		node                                             string
		reached, ends, failedForGood, attempts, failures int64
	}
	var rows []row
	for _, n := range got.Nodes {
		rows = append(rows, row{n.Node, n.Reached, n.EndsHere, n.FailedForGood, n.Attempts, n.Failures})
	}
	// The bad email ends where it failed for good, at verified.
	require.Equal(t, []row{{"signup", 10, 6, 0, 0, 0}, {"email", 4, 0, 0, 0, 0}, {"verified", 3, 4, 1, 4, 1}}, rows)
	require.Len(t, got.Series, 48, "24 hours in half hours")
	require.EqualValues(t, 10, got.Series[47].Started)
	require.EqualValues(t, 1, got.Series[47].FailedForGood)
	require.Contains(t, stdout, `"failed_for_good": 1`)

	code, stdout, stderr = runAs(t, url, "insights", "funnel", "-schema", schema)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `signup\s+input\s+█{30}\s+10\s+100.0%`, stdout)
	require.Regexp(t, `email\s+input\s+█{12}\s+4\s+40.0%`, stdout)
	require.Regexp(t, `FAILED FOR GOOD\s+ATTEMPTS / FAILED / ABANDONED\n`, stdout)
	require.Regexp(t, `verified\s+compute\s+█+\s+3\s+30.0%\s+\S+ / \S+\s+1\s+1\s+4 / 1 / 0`, stdout, "a failure ends at once")

	code, stdout, stderr = runAs(t, url, "insights", "funnel", "-schema", schema, "-since", "2562047h")
	require.Equal(t, 1, code, stdout)
	require.Contains(t, stderr, "an insights window or bucket is 100 years (876000h0m0s) at most (got 2562047h0m0s")

	code, _, stderr = runAs(t, url, "insights", "nope", "-schema", schema)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `no replica has recorded graph "nope"`)
}
