package persistence

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/journey-go/journey/graph"
)

// Insights scopes: which executions an InsightsQuery reads.
const (
	ScopeActive   = "active"   // not archived
	ScopeArchived = "archived" // archived
	ScopeAll      = "all"
)

// InsightsQuery selects the executions that Insights reads: those of a graph (and version) started
// in the window.
type InsightsQuery struct {
	Graph, Version string        // Version "": every version
	Since          time.Duration // the window: the executions started since this long ago
	Scope          string        // ScopeActive, ScopeArchived or ScopeAll
	IdleAfter      time.Duration // a flow ends at its last value once it has had no write for this long
	Bucket         time.Duration // the series' bucket
}

// Insights says where a graph's executions go and where they stop, and how its work went over
// time.
type Insights struct {
	Graph string
	// Executions counts the executions in scope; ToLastValue is the time from an execution's start
	// to its last value written, over those with a value.
	Executions                     int64
	ToLastValueP50, ToLastValueP95 time.Duration
	Nodes                          []NodeInsight // in graph order
	Series                         []InsightPoint
}

// NodeInsight is a node's part of Insights.
type NodeInsight struct {
	Node string
	Kind graph.Kind
	// Reached counts the executions where the node has a value, ReachedPct their share of all.
	Reached    int64
	ReachedPct float64
	// ToReach is the time from an execution's start to the node's first value.
	ToReachP50, ToReachP95 time.Duration
	// EndsHere counts the executions whose last value written is this node's, and that have had no
	// write since for IdleAfter.
	EndsHere int64
	// Attempts, Failures (attempts FAILED), Abandonments and the run time of finished attempts
	// (claim to finish), for the nodes that run.
	Attempts, Failures, Abandonments int64
	RunP50, RunP95                   time.Duration
}

// InsightPoint is one bucket of the series, starting at At.
type InsightPoint struct {
	At                                    time.Time
	Started, Succeeded, Failed, Abandoned int64
	RunP50, RunP95                        time.Duration
}

// insightsScope is the CTE of the executions in scope; its arguments are graph, version (twice),
// now, the window in seconds, and the scope (three times).
const insightsScope = `WITH e AS (SELECT id, created_at FROM {s}.executions
		WHERE graph_name = ? AND (? = '' OR graph_version = ?)
			AND created_at >= ?::timestamptz - ? * interval '1 second'
			AND (? = 'all' OR (? = 'archived') = (archived_at IS NOT NULL))),
	last AS (SELECT DISTINCT ON (v.execution_id) v.execution_id, v.node, v.set_at
		FROM {s}."values" v JOIN e ON e.id = v.execution_id ORDER BY v.execution_id, v.set_at DESC, v.node)`

// percentiles are the p50 and p95 of an interval expression x, in seconds.
func percentiles(x string) string {
	return `percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM ` + x + `)) AS p50,
		percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM ` + x + `)) AS p95`
}

// Insights reads the insights of q.Graph, on the recorded graph versions: the nodes, in the order
// of the newest recorded version (or q.Version), with what the executions in scope did.
func (s *Store) Insights(ctx context.Context, q InsightsQuery) (*Insights, error) {
	if err := checkTexts("graph", q.Graph, "version", q.Version); err != nil {
		return nil, err
	}
	switch {
	case q.Since <= 0 || q.Bucket <= 0 || q.IdleAfter <= 0:
		return nil, fmt.Errorf("%w: insights need a positive window, bucket and idle time (got %v, %v and %v)",
			ErrBadRequest, q.Since, q.Bucket, q.IdleAfter)
	case q.Scope != ScopeActive && q.Scope != ScopeArchived && q.Scope != ScopeAll:
		return nil, fmt.Errorf("%w: unknown scope %q: use %q, %q or %q", ErrBadRequest, q.Scope, ScopeActive, ScopeArchived, ScopeAll)
	}
	var versions []GraphVersion
	err := s.db.NewRaw(s.q(`SELECT * FROM {s}.graph_versions WHERE graph_name = ? AND (? = '' OR graph_version = ?)
		ORDER BY first_seen_at DESC, graph_version DESC LIMIT 1`), q.Graph, q.Version, q.Version).Scan(ctx, &versions)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("reading the graph versions: %w", err)
	}
	if len(versions) == 0 {
		return nil, fmt.Errorf("%w: no replica has recorded graph %q (version %q) in schema %s", ErrUnknownGraph, q.Graph, q.Version, s.schema)
	}
	now, err := s.now(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("reading the time: %w", err)
	}
	scope := []any{q.Graph, q.Version, q.Version, now, q.Since.Seconds(), q.Scope, q.Scope}
	out := &Insights{Graph: q.Graph}

	var total struct {
		N   int64    `bun:"n"`
		P50 *float64 `bun:"p50"`
		P95 *float64 `bun:"p95"`
	}
	err = s.db.NewRaw(s.q(insightsScope+` SELECT (SELECT count(*) FROM e) AS n, `+percentiles("l.set_at - e.created_at")+`
		FROM last l JOIN e ON e.id = l.execution_id`), scope...).Scan(ctx, &total)
	if err != nil {
		return nil, fmt.Errorf("counting the executions: %w", err)
	}
	out.Executions, out.ToLastValueP50, out.ToLastValueP95 = total.N, seconds(total.P50), seconds(total.P95)

	type nodeRow struct {
		Node      string   `bun:"node"`
		N         int64    `bun:"n"`
		Failed    int64    `bun:"failed"`
		Abandoned int64    `bun:"abandoned"`
		P50       *float64 `bun:"p50"`
		P95       *float64 `bun:"p95"`
	}
	var reached, ends, runs []nodeRow
	err = s.db.NewRaw(s.q(insightsScope+`,
		firsts AS (SELECT x.execution_id, x.node, min(x.at) AS at FROM (
				SELECT v.execution_id, v.node, v.set_at AS at FROM {s}."values" v JOIN e ON e.id = v.execution_id
				UNION ALL SELECT h.execution_id, h.node, h.changed_at FROM {s}.value_history h JOIN e ON e.id = h.execution_id
					WHERE h.value IS NOT NULL) x
			GROUP BY x.execution_id, x.node)
		SELECT v.node, count(*) AS n, 0 AS failed, 0 AS abandoned, `+percentiles("f.at - e.created_at")+`
		FROM {s}."values" v JOIN e ON e.id = v.execution_id
			JOIN firsts f ON f.execution_id = v.execution_id AND f.node = v.node
		GROUP BY v.node`), scope...).Scan(ctx, &reached)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("counting the nodes reached: %w", err)
	}
	err = s.db.NewRaw(s.q(insightsScope+` SELECT l.node, count(*) AS n, 0 AS failed, 0 AS abandoned, NULL AS p50, NULL AS p95
		FROM last l WHERE l.set_at < ?::timestamptz - ? * interval '1 second' GROUP BY l.node`),
		append(scope, now, q.IdleAfter.Seconds())...).Scan(ctx, &ends)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("counting where the executions end: %w", err)
	}
	err = s.db.NewRaw(s.q(insightsScope+` SELECT c.node, count(*) AS n,
			count(*) FILTER (WHERE c.state = 'FAILED') AS failed, count(*) FILTER (WHERE c.state = 'ABANDONED') AS abandoned,
			`+percentiles("c.finished_at - c.claimed_at")+`
		FROM {s}.computations c JOIN e ON e.id = c.execution_id GROUP BY c.node`), scope...).Scan(ctx, &runs)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("counting the attempts: %w", err)
	}
	byNode := func(rows []nodeRow, node string) nodeRow {
		for _, r := range rows {
			if r.Node == node {
				return r
			}
		}
		return nodeRow{}
	}
	for _, n := range versions[0].Nodes {
		r, e, c := byNode(reached, n.Name), byNode(ends, n.Name), byNode(runs, n.Name)
		ni := NodeInsight{Node: n.Name, Kind: kindOf(n.Kind), Reached: r.N, ToReachP50: seconds(r.P50), ToReachP95: seconds(r.P95),
			EndsHere: e.N, Attempts: c.N, Failures: c.Failed, Abandonments: c.Abandoned, RunP50: seconds(c.P50), RunP95: seconds(c.P95)}
		if out.Executions > 0 {
			ni.ReachedPct = 100 * float64(r.N) / float64(out.Executions)
		}
		out.Nodes = append(out.Nodes, ni)
	}
	if out.Series, err = s.insightSeries(ctx, q, scope, now); err != nil {
		return nil, err
	}
	return out, nil
}

// insightSeries reads the series of q: per bucket from the start of the window, the executions
// started, and the attempts that finished, by outcome, with their run times.
func (s *Store) insightSeries(ctx context.Context, q InsightsQuery, scope []any, now time.Time) ([]InsightPoint, error) {
	start := now.Add(-q.Since)
	buckets := int(math.Ceil(float64(q.Since) / float64(q.Bucket)))
	type bucketRow struct {
		I         int      `bun:"i"`
		Started   int64    `bun:"started"`
		Succeeded int64    `bun:"succeeded"`
		Failed    int64    `bun:"failed"`
		Abandoned int64    `bun:"abandoned"`
		P50       *float64 `bun:"p50"`
		P95       *float64 `bun:"p95"`
	}
	var rows []bucketRow
	err := s.db.NewRaw(s.q(insightsScope+`,
		st AS (SELECT floor(extract(epoch FROM e.created_at - ?::timestamptz) / ?)::int AS i, count(*) AS started
			FROM e GROUP BY 1),
		fin AS (SELECT floor(extract(epoch FROM c.finished_at - ?::timestamptz) / ?)::int AS i,
				count(*) FILTER (WHERE c.state = 'SUCCESS') AS succeeded, count(*) FILTER (WHERE c.state = 'FAILED') AS failed,
				count(*) FILTER (WHERE c.state = 'ABANDONED') AS abandoned, `+percentiles("c.finished_at - c.claimed_at")+`
			FROM {s}.computations c JOIN e ON e.id = c.execution_id WHERE c.finished_at >= ?::timestamptz GROUP BY 1)
		SELECT i, coalesce(st.started, 0) AS started, coalesce(fin.succeeded, 0) AS succeeded,
			coalesce(fin.failed, 0) AS failed, coalesce(fin.abandoned, 0) AS abandoned, fin.p50, fin.p95
		FROM st FULL JOIN fin USING (i) ORDER BY i`),
		append(scope, start, q.Bucket.Seconds(), start, q.Bucket.Seconds(), start)...).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("reading the series: %w", err)
	}
	series := make([]InsightPoint, buckets)
	for i := range series {
		series[i].At = start.Add(time.Duration(i) * q.Bucket)
	}
	for _, r := range rows {
		if r.I < 0 || r.I >= buckets {
			continue
		}
		series[r.I] = InsightPoint{At: series[r.I].At, Started: r.Started, Succeeded: r.Succeeded, Failed: r.Failed,
			Abandoned: r.Abandoned, RunP50: seconds(r.P50), RunP95: seconds(r.P95)}
	}
	return series, nil
}

// seconds turns a number of seconds, if any, into a duration.
func seconds(f *float64) time.Duration {
	if f == nil {
		return 0
	}
	return time.Duration(*f * float64(time.Second)).Round(time.Microsecond)
}

// kindOf returns the kind whose name is name, as graph.Kind.String gives it, or 0.
func kindOf(name string) graph.Kind {
	for k := graph.KindInput; k <= graph.KindArchive; k++ {
		if k.String() == name {
			return k
		}
	}
	return 0
}

// The defaults of an InsightsQuery.
const (
	DefaultInsightsSince = 24 * time.Hour
	DefaultIdleAfter     = 24 * time.Hour
	maxSeriesBuckets     = 48
)

// bucketSizes are the sizes a series' bucket is chosen among.
var bucketSizes = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour,
	3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}

// WithDefaults fills in what q leaves zero: a window of 24 hours, the active executions, an idle
// time of 24 hours, and the smallest bucket of bucketSizes that cuts the window into 48 or fewer.
// A negative window, idle time or bucket stays, for Insights to refuse.
func (q InsightsQuery) WithDefaults() InsightsQuery {
	if q.Since == 0 {
		q.Since = DefaultInsightsSince
	}
	if q.IdleAfter == 0 {
		q.IdleAfter = DefaultIdleAfter
	}
	if q.Scope == "" {
		q.Scope = ScopeActive
	}
	if q.Bucket == 0 && q.Since > 0 {
		q.Bucket = bucketSizes[len(bucketSizes)-1]
		for _, b := range bucketSizes {
			if q.Since <= maxSeriesBuckets*b {
				q.Bucket = b
				break
			}
		}
	}
	return q
}
