package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/journey-go/journey/persistence"
)

const insightsDescription = `insights shows where the executions of a graph go and where they stop: per node, in graph
order, the executions that reached it (with a bar), how long they took from their start to its
first value (p50, p95), those that ended there (failed for good there, or else their last value
and no write for -idle-after), those that failed for good there (its last attempt failed or was
abandoned), and its attempts, failures, abandonments and run times; then, per bucket of the
window, the executions started, the attempts that succeeded, failed and were abandoned, and the
executions that failed for good. With -json, the same as JSON: snake_case keys, durations in
milliseconds with an _ms suffix.`

// insightsJSON is the JSON of journey insights.
type insightsJSON struct {
	Graph          string             `json:"graph"`
	Executions     int64              `json:"executions"`
	ToLastValueP50 float64            `json:"to_last_value_p50_ms"`
	ToLastValueP95 float64            `json:"to_last_value_p95_ms"`
	Nodes          []nodeInsightJSON  `json:"nodes"`
	Series         []insightPointJSON `json:"series"`
	// PendingMinutes: minutes of executions whose changes the answer does not show yet.
	PendingMinutes int `json:"pending_minutes"`
}

type nodeInsightJSON struct {
	Node         string  `json:"node"`
	Kind         string  `json:"kind"`
	Reached      int64   `json:"reached"`
	ReachedPct   float64 `json:"reached_pct"`
	ToReachP50   float64 `json:"to_reach_p50_ms"`
	ToReachP95   float64 `json:"to_reach_p95_ms"`
	EndsHere     int64   `json:"ends_here"`
	Attempts     int64   `json:"attempts"`
	Failures     int64   `json:"failures"`
	Abandonments int64   `json:"abandonments"`
	RunP50       float64 `json:"run_p50_ms"`
	RunP95       float64 `json:"run_p95_ms"`

	// FailedForGood: the executions that failed for good at the node, which EndsHere counts too.
	FailedForGood int64 `json:"failed_for_good"`
}

type insightPointJSON struct {
	At        string  `json:"at"`
	Started   int64   `json:"started"`
	Succeeded int64   `json:"succeeded"`
	Failed    int64   `json:"failed"`
	Abandoned int64   `json:"abandoned"`
	RunP50    float64 `json:"run_p50_ms"`
	RunP95    float64 `json:"run_p95_ms"`

	// FailedForGood: the executions that failed for good in the bucket.
	FailedForGood int64 `json:"failed_for_good"`
}

// msOf is d in milliseconds.
func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// runInsights implements "journey insights GRAPH".
func runInsights(ctx context.Context, env *environment, args []string) int {
	fs, of := newOpsFlagSet(env, "insights", "GRAPH [-version V] [-since 24h] [-scope active|archived|all] [-json]", insightsDescription)
	var q persistence.InsightsQuery
	fs.StringVar(&q.Version, "version", "", "keep the executions of this `version` (default: all versions)")
	fs.DurationVar(&q.Since, "since", persistence.DefaultInsightsSince, "the window: the executions started since this long ago")
	fs.StringVar(&q.Scope, "scope", persistence.ScopeActive, "active, archived or all executions")
	fs.DurationVar(&q.IdleAfter, "idle-after", persistence.DefaultIdleAfter, "an execution ends at its last value after this long without a write")
	fs.DurationVar(&q.Bucket, "bucket", 0, "the series' bucket (default: chosen from -since, 48 buckets at most)")
	pos, code, ok := parseArgs(env, fs, args, "GRAPH")
	if !ok {
		return code
	}
	store, closeDB, ok := openStore(ctx, env, "insights", *of.schema)
	if !ok {
		return 1
	}
	defer closeDB()
	q.Graph = pos[0]
	ins, err := store.Insights(ctx, q.WithDefaults())
	if err != nil {
		return fail(env, "insights", err)
	}
	if *of.json {
		return printJSON(env, toInsightsJSON(ins))
	}
	showInsights(env, ins)
	return 0
}

func toInsightsJSON(ins *persistence.Insights) insightsJSON {
	out := insightsJSON{Graph: ins.Graph, Executions: ins.Executions, ToLastValueP50: msOf(ins.ToLastValueP50),
		ToLastValueP95: msOf(ins.ToLastValueP95), Nodes: []nodeInsightJSON{}, Series: []insightPointJSON{}, PendingMinutes: ins.Pending}
	for _, n := range ins.Nodes {
		out.Nodes = append(out.Nodes, nodeInsightJSON{Node: n.Node, Kind: n.Kind.String(), Reached: n.Reached,
			ReachedPct: n.ReachedPct, ToReachP50: msOf(n.ToReachP50), ToReachP95: msOf(n.ToReachP95), EndsHere: n.EndsHere,
			Attempts: n.Attempts, Failures: n.Failures, Abandonments: n.Abandonments, RunP50: msOf(n.RunP50), RunP95: msOf(n.RunP95),
			FailedForGood: n.FailedForGood})
	}
	for _, p := range ins.Series {
		out.Series = append(out.Series, insightPointJSON{At: p.At.UTC().Format(time.RFC3339), Started: p.Started,
			Succeeded: p.Succeeded, Failed: p.Failed, Abandoned: p.Abandoned, RunP50: msOf(p.RunP50), RunP95: msOf(p.RunP95),
			FailedForGood: p.FailedForGood})
	}
	return out
}

// barWidth is the width of a funnel bar at 100%.
const barWidth = 30

// showInsights prints the funnel, with bars drawn in text, then the series.
func showInsights(env *environment, ins *persistence.Insights) {
	fmt.Fprintf(env.stdout, "Graph %q: %d execution(s); start to last value p50 %v, p95 %v\n\n", ins.Graph, ins.Executions,
		ins.ToLastValueP50.Round(time.Millisecond), ins.ToLastValueP95.Round(time.Millisecond))
	rows := make([][]string, 0, len(ins.Nodes))
	for _, n := range ins.Nodes {
		bar := strings.Repeat("█", int(n.ReachedPct*barWidth/100+0.5))
		runs := "-"
		if n.Attempts > 0 {
			runs = fmt.Sprintf("%d / %d / %d, run p50 %v p95 %v", n.Attempts, n.Failures, n.Abandonments,
				n.RunP50.Round(time.Millisecond), n.RunP95.Round(time.Millisecond))
		}
		rows = append(rows, []string{n.Node, n.Kind.String(), fmt.Sprintf("%-*s", barWidth, bar), fmt.Sprint(n.Reached),
			fmt.Sprintf("%.1f%%", n.ReachedPct), fmt.Sprintf("%v / %v", n.ToReachP50.Round(time.Millisecond), n.ToReachP95.Round(time.Millisecond)),
			fmt.Sprint(n.EndsHere), fmt.Sprint(n.FailedForGood), runs})
	}
	table(env.stdout, "NODE\tKIND\t\tREACHED\t%\tTO REACH p50 / p95\tENDS HERE\tFAILED FOR GOOD\tATTEMPTS / FAILED / ABANDONED", rows)
	fmt.Fprintln(env.stdout)
	rows = rows[:0]
	for _, p := range ins.Series {
		rows = append(rows, []string{p.At.Local().Format("2006-01-02 15:04"), fmt.Sprint(p.Started), fmt.Sprint(p.Succeeded),
			fmt.Sprint(p.Failed), fmt.Sprint(p.Abandoned), fmt.Sprintf("%v / %v", p.RunP50.Round(time.Millisecond), p.RunP95.Round(time.Millisecond)),
			fmt.Sprint(p.FailedForGood)})
	}
	table(env.stdout, "FROM\tSTARTED\tSUCCEEDED\tFAILED\tABANDONED\tRUN p50 / p95\tFAILED FOR GOOD", rows)
	if ins.Pending > 0 {
		fmt.Fprintf(env.stdout, "\nThe changes of %d minute(s) of executions are not counted yet: the sweep brings them in.\n", ins.Pending)
	}
}
