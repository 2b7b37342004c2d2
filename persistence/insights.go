package persistence

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/persistence/machine"
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
	// Pending counts the minutes of executions that changed and that this answer does not show
	// yet: a reading brings the cells up to date for a moment, and leaves the rest to the sweep
	// lease holder. 0: the answer is up to date.
	Pending int
}

// NodeInsight is a node's part of Insights.
type NodeInsight struct {
	Node string
	Kind graph.Kind
	// Reached counts the executions where the node has a value, ReachedPct their share of all.
	Reached    int64
	ReachedPct float64
	// ToReach is the time from an execution's start to the node's first value. Every duration of
	// Insights is estimated from a histogram, within 9%.
	ToReachP50, ToReachP95 time.Duration
	// EndsHere counts the executions that end at this node: those that failed for good here
	// (FailedForGood), and those that did not fail whose last value written is this node's, and
	// that have had no write since for IdleAfter, to the second.
	EndsHere int64
	// FailedForGood counts the executions that failed for good at this node: its newest attempt
	// failed or was abandoned, with no retry left. An execution fails at one node, the first to
	// fail for good; a node's failed attempts are Failures.
	FailedForGood int64
	// Attempts counts the attempts that ran and ended: succeeded, Failures (FAILED) and
	// Abandonments; the run time is their time from claim to finish, for the nodes that run.
	Attempts, Failures, Abandonments int64
	RunP50, RunP95                   time.Duration
}

// InsightPoint is one bucket of the series, starting at At: the executions Started in it; the
// attempts that Succeeded, Failed and were Abandoned in it, and their run times; and the
// executions that FailedForGood in it (NodeInsight.FailedForGood).
type InsightPoint struct {
	At                                    time.Time
	Started, Succeeded, Failed, Abandoned int64
	RunP50, RunP95                        time.Duration
	FailedForGood                         int64
}

// Insights read the cells of the minutes in the window, which the roll keeps up to date (see
// migration 0021): a reading first rolls what changed, for at most insightsBudget, and says in
// Pending how many minutes it left for the sweep lease holder.
const insightsBudget = 300 * time.Millisecond

// Insights reads the insights of q.Graph, on the recorded graph versions: the nodes, in the order
// of the newest recorded version (or q.Version), with what the executions in scope did. The window
// is counted in whole minutes: it ends with the current one.
func (s *Store) Insights(ctx context.Context, q InsightsQuery) (*Insights, error) {
	if err := checkTexts("graph", q.Graph, "version", q.Version); err != nil {
		return nil, err
	}
	switch {
	case q.Since <= 0 || q.Bucket <= 0 || q.IdleAfter <= 0:
		return nil, fmt.Errorf("%w: insights need a positive window, bucket and idle time (got %v, %v and %v)",
			ErrBadRequest, q.Since, q.Bucket, q.IdleAfter)
	case q.Since > MaxInsightsWindow || q.Bucket > MaxInsightsWindow:
		return nil, fmt.Errorf("%w: an insights window or bucket is 100 years (%v) at most (got %v and %v)",
			ErrBadRequest, MaxInsightsWindow, q.Since, q.Bucket)
	case q.Bucket%time.Minute != 0:
		return nil, fmt.Errorf("%w: an insights bucket is a whole number of minutes (got %v)", ErrBadRequest, q.Bucket)
	case (q.Since+q.Bucket-1)/q.Bucket > MaxInsightsBuckets:
		return nil, fmt.Errorf("%w: an insights series holds %d buckets at most: a window of %v in buckets of %v would take %d; "+
			"use a larger bucket", ErrBadRequest, MaxInsightsBuckets, q.Since, q.Bucket, (q.Since+q.Bucket-1)/q.Bucket)
	case q.Scope != ScopeActive && q.Scope != ScopeArchived && q.Scope != ScopeAll:
		return nil, fmt.Errorf("%w: unknown scope %q: use %q, %q or %q", ErrBadRequest, q.Scope, ScopeActive, ScopeArchived, ScopeAll)
	}
	var versions []GraphVersion
	err := s.db.NewRaw(s.q(`SELECT `+cols("", versionColumns)+` FROM {s}.graph_versions WHERE graph_name = ? AND (? = '' OR graph_version = ?)
		ORDER BY first_seen_at DESC, graph_version DESC LIMIT 1`), q.Graph, q.Version, q.Version).Scan(ctx, &versions)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("reading the graph versions: %w", err)
	}
	if len(versions) == 0 {
		return nil, fmt.Errorf("%w: no replica has recorded graph %q (version %q) in schema %s", ErrUnknownGraph, q.Graph, q.Version, s.schema)
	}
	out := &Insights{Graph: q.Graph}
	if out.Pending, err = s.RollInsights(ctx, q.Graph, insightsBudget); err != nil {
		return nil, err
	}
	now, err := s.now(ctx, s.db)
	if err != nil {
		return nil, fmt.Errorf("reading the time: %w", err)
	}
	buckets := int((q.Since + q.Bucket - 1) / q.Bucket) // checked above: the sum cannot overflow
	end := now.Truncate(time.Minute).Add(time.Minute)
	start := end.Add(-time.Duration(buckets) * q.Bucket)
	out.Series = make([]InsightPoint, buckets)
	for i := range out.Series {
		out.Series[i].At = start.Add(time.Duration(i) * q.Bucket)
	}
	// The cells of the window, summed per measure, node and point of the series (-1 for none),
	// and their histograms.
	where := ` FROM {s}.insight_cells WHERE graph_name = ? AND minute >= ? AND minute < ? AND (? = '' OR graph_version = ?)
		AND (? = 'all' OR archived = (? = 'archived'))`
	point := `CASE WHEN measure = 'executions' THEN floor(extract(epoch FROM minute - ?::timestamptz) / ?)
		WHEN measure IN ('finished', 'failed') THEN floor(extract(epoch FROM at - ?::timestamptz) / ?) ELSE -1 END::int AS i`
	pointArgs := []any{start, q.Bucket.Seconds(), start, q.Bucket.Seconds()}
	whereArgs := []any{q.Graph, start, end, q.Version, q.Version, q.Scope, q.Scope}
	var sums []struct {
		Measure   string `bun:"measure"`
		Node      string `bun:"node"`
		I         int    `bun:"i"`
		N         int64  `bun:"n"`
		Failed    int64  `bun:"failed"`
		Abandoned int64  `bun:"abandoned"`
	}
	err = s.db.NewRaw(s.q(`SELECT measure, node, `+point+`, coalesce(sum(n) FILTER (WHERE measure <> 'ended' OR at < ?), 0) AS n,
			sum(failed) AS failed, sum(abandoned) AS abandoned`+where+` GROUP BY 1, 2, 3`),
		slices.Concat(pointArgs, []any{now.Add(-q.IdleAfter)}, whereArgs)...).Scan(ctx, &sums)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("reading the insight cells: %w", err)
	}
	var bins []struct {
		Measure string `bun:"measure"`
		Node    string `bun:"node"`
		I       int    `bun:"i"`
		Bin     int    `bun:"bin"`
		N       int64  `bun:"n"`
	}
	err = s.db.NewRaw(s.q(`SELECT measure, node, `+point+`, h.bin, sum(h.n) AS n`+
		strings.Replace(where, "insight_cells", "insight_cells, unnest(bins, counts) AS h(bin, n)", 1)+
		` AND measure <> 'ended' GROUP BY 1, 2, 3, 4`), slices.Concat(pointArgs, whereArgs)...).Scan(ctx, &bins)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("reading the insight histograms: %w", err)
	}

	type key struct{ measure, node string }
	type sum struct{ n, failed, abandoned int64 }
	totals := map[key]sum{}
	inWindow := func(i int) bool { return i >= 0 && i < buckets }
	for _, r := range sums {
		k := key{r.Measure, r.Node}
		totals[k] = sum{totals[k].n + r.N, totals[k].failed + r.Failed, totals[k].abandoned + r.Abandoned}
		switch {
		case r.Measure == "executions" && inWindow(r.I):
			out.Series[r.I].Started += r.N
		case r.Measure == "finished" && inWindow(r.I):
			p := &out.Series[r.I]
			p.Succeeded, p.Failed, p.Abandoned = p.Succeeded+r.N, p.Failed+r.Failed, p.Abandoned+r.Abandoned
		case r.Measure == "failed" && inWindow(r.I):
			out.Series[r.I].FailedForGood += r.N
		}
	}
	hists, points := map[key]histogram{}, make([]histogram, buckets)
	for _, b := range bins {
		k := key{b.Measure, b.Node}
		if hists[k] == nil {
			hists[k] = histogram{}
		}
		hists[k][b.Bin] += b.N
		if b.Measure == "finished" && inWindow(b.I) {
			if points[b.I] == nil {
				points[b.I] = histogram{}
			}
			points[b.I][b.Bin] += b.N
		}
	}
	for i, h := range points {
		out.Series[i].RunP50, out.Series[i].RunP95 = h.quantile(0.5), h.quantile(0.95)
	}
	out.Executions = totals[key{"executions", ""}].n
	last := hists[key{"executions", ""}]
	out.ToLastValueP50, out.ToLastValueP95 = last.quantile(0.5), last.quantile(0.95)
	for _, n := range versions[0].Nodes {
		reach, ran := hists[key{"reached", n.Name}], totals[key{"ran", n.Name}]
		failed := totals[key{"failed", n.Name}].n
		ni := NodeInsight{Node: n.Name, Kind: kindOf(n.Kind), Reached: totals[key{"reached", n.Name}].n,
			ToReachP50: reach.quantile(0.5), ToReachP95: reach.quantile(0.95), EndsHere: totals[key{"ended", n.Name}].n + failed,
			FailedForGood: failed, Attempts: ran.n, Failures: ran.failed, Abandonments: ran.abandoned}
		ni.RunP50, ni.RunP95 = hists[key{"ran", n.Name}].quantile(0.5), hists[key{"ran", n.Name}].quantile(0.95)
		if out.Executions > 0 {
			ni.ReachedPct = 100 * float64(ni.Reached) / float64(out.Executions)
		}
		out.Nodes = append(out.Nodes, ni)
	}
	return out, nil
}

// histogram counts durations per bin: bin b holds those in [2^(b/4), 2^((b+1)/4)) microseconds,
// and bin 0 the shorter ones too.
type histogram map[int]int64

// quantile estimates the q-quantile of h as the middle of the bin it falls in, within 9%; 0 for
// an empty histogram.
func (h histogram) quantile(q float64) time.Duration {
	var n int64
	for _, c := range h {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank, seen := int64(math.Ceil(q*float64(n))), int64(0)
	for _, b := range slices.Sorted(maps.Keys(h)) {
		if seen += h[b]; seen >= rank {
			return time.Duration(math.Exp2((float64(b)+0.5)/4) * float64(time.Microsecond)).Round(time.Microsecond)
		}
	}
	return 0
}

// binOf is the SQL of the histogram bin of the interval x.
func binOf(x string) string {
	return `floor(4 * ln(greatest(extract(epoch FROM ` + x + `)::float8 * 1e6, 1)) / ln(2))::smallint`
}

// rollLockKey names the advisory lock that a roll holds, one at a time per schema.
func (s *Store) rollLockKey() string { return "journey-insights:" + s.schema }

// markFrom returns the statement that marks the minutes that source lists (a query of
// graph_name, graph_version and minute, in any order and with repeats) as out of date for the
// roll. It inserts each minute's mark, or locks it if it is there already, until its transaction
// ends: the roll claims a mark once the transaction that locked it has ended, and then recomputes
// the minute from a snapshot that holds its writes. DO NOTHING would lock nothing, and the roll
// could delete the mark and recompute the minute before the write commits: the write would never
// be counted. ON CONFLICT DO UPDATE locks the row it finds even where its WHERE updates nothing.
// The marks are taken in their key's order, which the roll's claim follows too, so that two
// writes that mark the same minutes cannot deadlock.
//
// A write that marks a minute waits for another that holds its mark until that one has
// committed: the mark goes with the COMMIT, for as short a wait as can be.
func markFrom(source string) string {
	return `INSERT INTO {s}.insight_marks (graph_name, graph_version, minute)
		SELECT DISTINCT graph_name, graph_version, minute FROM (` + source + `) AS marked
		ORDER BY graph_name, graph_version, minute
		ON CONFLICT (graph_name, graph_version, minute, claimed) DO UPDATE SET claimed = false WHERE false`
}

// mark marks the minutes of the executions sts, loaded, as out of date for the roll, with the
// COMMIT of t (see markFrom): a write that neither creates an execution nor ends an attempt calls
// it.
func (s *Store) mark(t *txn, xs []*machine.Loaded) {
	gs, vs, ms := make([]string, len(xs)), make([]string, len(xs)), make([]time.Time, len(xs))
	for i, x := range xs {
		gs[i], vs[i], ms[i] = x.Exec.GraphName, x.Exec.GraphVersion, x.Exec.CreatedAt.Truncate(time.Minute)
	}
	query := markFrom(`SELECT u.graph_name, u.graph_version, u.minute
		FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS u(graph_name, graph_version, minute)`)
	if t.caller {
		// An application's transaction may stay open long after the write: holding the marks
		// until then would hold up the writes of every execution of the same minutes. A mark it
		// inserts is claimed only once it commits; one that is there already, if the roll claims
		// it before, leaves the write's minute unrolled until another write marks it.
		query = strings.Replace(query, "ON CONFLICT (graph_name, graph_version, minute, claimed) DO UPDATE SET claimed = false WHERE false",
			"ON CONFLICT DO NOTHING", 1)
	}
	t.atCommit(s.q(query), gs, vs, ms)
}

// rollChunk is how many marked minutes one transaction of the roll brings up to date.
const rollChunk = 32

// The watermark. A roll marks the minutes of the executions created and of the attempts ended
// since its watermark, found through the indexes on created_at and finished_at. A row is stamped
// with the time its transaction began (or with the injected clock's), and a transaction still in
// progress may commit rows stamped before the roll that looks: the watermark must stay behind
// every transaction that may yet commit. pg_stat_activity's xact_start would say when each
// began, but it is NULL for the sessions of other roles unless the reader has pg_read_all_stats,
// which a dashboard's role has no reason to hold. What any role can read is pg_locks: every
// transaction holds the lock of its virtual transaction id (vxid) from its start to its end. So
// each roll records the vxids in progress, and a vxid that the previous roll did not see began
// after that roll looked (watchMargin before it, for the moment between a transaction's start
// and its lock). See nextWatch.
//
// rollLagCap: a transaction in progress for longer than this (an idle session left in a
// transaction, a pg_dump) would hold the watermark back, and make every roll read all the rows
// since it began. The watermark passes it instead, and once it has ended, one roll reads the rows
// stamped from its start to the watermark once, keeping only those written by transaction ids
// at least as new as the oldest in progress when it was first seen: its own are.
const (
	rollLagCap  = time.Minute
	watchMargin = time.Second
)

// watch is what a roll leaves for the next (the table insight_watch): its watermark, when it
// looked at the transactions in progress, and, for each (by vxid), when it began at the earliest
// (Since) and the oldest transaction id it can write with (Xmins, 32 bits).
type watch struct {
	Watermark time.Time   `bun:"watermark"`
	At        time.Time   `bun:"at"`
	Vxids     []string    `bun:"vxids,array"`
	Since     []time.Time `bun:"since,array"`
	Xmins     []int64     `bun:"xmins,array"`
}

// sight is what a roll sees: the vxids of the transactions in progress in the database, but its
// own; At, a time before it looked; Xmin, the oldest transaction id in progress before it looked
// (32 bits), which a transaction it sees writes with, or a newer one.
type sight struct {
	At    time.Time `bun:"at"`
	Xmin  int64     `bun:"xmin"`
	Vxids []string  `bun:"vxids,array"`
}

// rollRange is what a roll marks: the rows stamped since From (every row at the first roll,
// when From is zero), and those stamped from CatchUp to From by a transaction id at least as
// new as CatchXmin (none if CatchUp is From).
type rollRange struct {
	From, CatchUp time.Time
	CatchXmin     int64
}

// nextWatch decides what a roll marks, from what the last roll left (prev, nil at the first) and
// what this one sees (now), and returns what it leaves for the next.
//
// Why no committed row is missed: let a row be stamped t by a transaction X, and let r be the
// first roll that looks after X has ended; r marks with a statement that runs after it looked, so
// it sees the row. If the roll before r did not see X, X began after it looked, so t is past
// that roll's time, and r's From is not later than that time. If it did see X, r finds X ended:
// either X's Since (when X began at the earliest, so before t) was not before r's From, or r
// catches up from Since, keeping the rows of transaction ids as new as X's.
func nextWatch(prev *watch, now sight) (rollRange, watch) {
	r := rollRange{CatchXmin: now.Xmin}
	began := time.Time{} // a transaction that the last roll did not see began after it looked
	known := map[string]int{}
	if prev != nil {
		r.From, began = prev.Watermark, prev.At.Add(-watchMargin)
		for i, v := range prev.Vxids {
			known[v] = i
		}
	}
	r.CatchUp = r.From
	next := watch{Watermark: now.At.Add(-watchMargin), At: now.At, Vxids: []string{}, Since: []time.Time{}, Xmins: []int64{}}
	seen := map[string]bool{}
	for _, v := range now.Vxids {
		since, xmin := began, now.Xmin
		if i, ok := known[v]; ok {
			since, xmin = prev.Since[i], prev.Xmins[i]
		}
		seen[v] = true
		next.Vxids, next.Since, next.Xmins = append(next.Vxids, v), append(next.Since, since), append(next.Xmins, xmin)
		if !since.Before(now.At.Add(-rollLagCap)) && since.Before(next.Watermark) {
			next.Watermark = since
		}
	}
	if prev == nil {
		return r, next
	}
	catching := false
	for i, v := range prev.Vxids {
		if seen[v] || !prev.Since[i].Before(r.From) {
			continue // still in progress, or its rows are past the watermark
		}
		if !catching || prev.Since[i].Before(r.CatchUp) {
			r.CatchUp = prev.Since[i]
		}
		if !catching || int32(uint32(prev.Xmins[i])-uint32(r.CatchXmin)) < 0 { // transaction ids wrap around
			r.CatchXmin = prev.Xmins[i]
		}
		catching = true
	}
	return r, next
}

// RollInBackground is the budget of a roll in the background (RollInsights), which the sweep
// lease holder runs.
const RollInBackground time.Duration = -1

// markedMinute is a minute of a graph version whose cells a roll brings up to date.
type markedMinute struct {
	Graph   string    `bun:"graph_name"`
	Version string    `bun:"graph_version"`
	Minute  time.Time `bun:"minute"`
}

// minuteArrays is ms as three arrays: graph, version, minute.
func minuteArrays(ms []markedMinute) []any {
	gs, vs, ts := make([]string, len(ms)), make([]string, len(ms)), make([]time.Time, len(ms))
	for i, m := range ms {
		gs[i], vs[i], ts[i] = m.Graph, m.Version, m.Minute
	}
	return []any{pgdialect.Array(gs), pgdialect.Array(vs), pgdialect.Array(ts)}
}

// settleFor: in the background, a minute whose executions' attempts ended since the last roll
// waits for them to stop, while it is younger than settleFor. A roll recomputes a minute
// from every execution that started in it: the minutes of a burst (a drain of 1,000,000, its
// executions started within two minutes) are rolled once, after it, not over and over while it
// runs, when each roll of a minute of 700,000 executions took tens of seconds of a server's core.
const settleFor = 10 * time.Minute

// backgroundBudget bounds a roll in the background, which the sweep lease holder runs apart from
// its passes. rollWeight: in the background, a minute is rolled again only after rollWeight
// times what its last roll took.
const (
	backgroundBudget = time.Minute
	rollWeight       = 10
)

// RollInsights brings the insight cells up to date: it marks the minutes of the executions
// created and of the attempts ended since its watermark (see nextWatch), claims the minutes that
// writes marked, then brings the claimed minutes of graph ("" for every graph) up to date, a
// chunk per transaction, until none is left or budget has passed. It returns how many marked
// minutes are left, and at least 1 if it ran out of time before it marked what changed. The
// first roll marks every minute that has executions.
//
// A reading's roll (a positive budget) stops each chunk's statement when the budget runs out, so
// that the reading answers in time. A roll in the background (budget RollInBackground) leaves the
// minutes that are still filling, and those whose last roll was recent for their size, and takes
// as long as a chunk needs.
func (s *Store) RollInsights(ctx context.Context, graph string, budget time.Duration) (int, error) {
	began, background := time.Now(), budget == RollInBackground
	var settling []markedMinute // in the background, the minutes left to settle (see settleFor)
	if background {
		budget = backgroundBudget
	}
	timeout := func() time.Duration {
		if background {
			return 0
		}
		return max(budget-time.Since(began), 50*time.Millisecond)
	}
	err := s.rollTx(ctx, timeout(), func(ctx context.Context, tx bun.Tx) error {
		var prev []watch
		err := tx.NewRaw(s.q(`SELECT watermark, at, vxids, since, xmins FROM {s}.insight_watch`)).Scan(ctx, &prev)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("reading the watermark: %w", err)
		}
		// What is in progress is read before the rows are: a statement's snapshot is taken as
		// it starts.
		var now sight
		err = tx.NewRaw(`SELECT coalesce(?::timestamptz, statement_timestamp()) AS at,
				pg_snapshot_xmin(pg_current_snapshot())::text::bigint % 4294967296 AS xmin,
				array(SELECT l.virtualtransaction FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
					WHERE l.locktype = 'virtualxid' AND l.mode = 'ExclusiveLock' AND l.granted
						AND a.datname = current_database() AND l.pid <> pg_backend_pid() ORDER BY 1) AS vxids`,
			s.clock.NowOrNil()).Scan(ctx, &now)
		if err != nil {
			return fmt.Errorf("reading the transactions in progress: %w", err)
		}
		var r rollRange
		var next watch
		if len(prev) == 0 {
			r, next = nextWatch(nil, now)
		} else {
			r, next = nextWatch(&prev[0], now)
		}
		// The executions created and the attempts ended since the watermark (at the first roll,
		// every execution), and, catching up, those of transactions as new as CatchXmin. On Citus,
		// a row's xmin is a worker's transaction id, which no snapshot here orders: catching up
		// marks every row stamped since CatchUp, a minute rolled again for nothing at worst.
		xmin, newer := ", xmin", func(alias string) string { return "age(" + alias + "xmin) <= age(?::text::xid)" }
		if s.citus {
			xmin, newer = "", func(string) string { return "?::bigint IS NOT NULL" }
		}
		finished := `SELECT e.graph_name, e.graph_version, date_trunc('minute', e.created_at), true
				FROM (SELECT lane, execution_id, finished_at` + xmin + ` FROM {s}.nodes
						WHERE state IN ('SUCCESS', 'FAILED', 'ABANDONED', 'CANCELED')
					UNION ALL SELECT lane, execution_id, finished_at` + xmin + ` FROM {s}.attempts) c
				JOIN {s}.executions e ON e.lane = c.lane AND e.id = c.execution_id`
		var changed []struct {
			Graph   string    `bun:"graph_name"`
			Version string    `bun:"graph_version"`
			Minute  time.Time `bun:"minute"`
			Ended   bool      `bun:"ended"` // an attempt ended, rather than an execution started
		}
		err = tx.NewRaw(s.q(`SELECT graph_name, graph_version, date_trunc('minute', created_at) AS minute, false AS ended
				FROM {s}.executions WHERE created_at >= ?
				UNION `+finished+` WHERE c.finished_at >= ? AND ?
				UNION SELECT graph_name, graph_version, date_trunc('minute', created_at), false FROM {s}.executions
				WHERE created_at >= ? AND created_at < ? AND `+newer("")+`
				UNION `+finished+` WHERE c.finished_at >= ? AND c.finished_at < ? AND `+newer("c.")+``),
			r.From, r.From, !r.From.IsZero(), r.CatchUp, r.From, r.CatchXmin, r.CatchUp, r.From, r.CatchXmin).Scan(ctx, &changed)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("reading what changed since %v: %w", r.From, err)
		}
		marks := make([]markedMinute, len(changed))
		for i, m := range changed {
			marks[i] = markedMinute{Graph: m.Graph, Version: m.Version, Minute: m.Minute}
			if background && m.Ended && !m.Minute.Before(now.At.Add(-settleFor)) {
				settling = append(settling, marks[i])
			}
		}
		if len(marks) > 0 {
			if _, err := tx.NewRaw(s.q(`INSERT INTO {s}.insight_marks (graph_name, graph_version, minute, claimed)
				SELECT g, v, m, true FROM unnest(?::text[], ?::text[], ?::timestamptz[]) AS u(g, v, m)
				ON CONFLICT DO NOTHING`), minuteArrays(marks)...).Exec(ctx); err != nil {
				return fmt.Errorf("marking what changed since %v: %w", r.From, err)
			}
		}
		// The marks are locked in the writes' order (see markFrom); one that a write holds is
		// claimed once the write has ended.
		if _, err := tx.NewRaw(s.q(`WITH l AS MATERIALIZED (SELECT graph_name, graph_version, minute FROM {s}.insight_marks
				WHERE NOT claimed ORDER BY graph_name, graph_version, minute FOR UPDATE),
			c AS (DELETE FROM {s}.insight_marks m USING l
				WHERE m.graph_name = l.graph_name AND m.graph_version = l.graph_version AND m.minute = l.minute AND NOT m.claimed
				RETURNING m.graph_name, m.graph_version, m.minute)
			INSERT INTO {s}.insight_marks (graph_name, graph_version, minute, claimed)
			SELECT graph_name, graph_version, minute, true FROM c
			ON CONFLICT DO NOTHING`)).Exec(ctx); err != nil {
			return fmt.Errorf("claiming the marked minutes: %w", err)
		}
		_, err = tx.NewRaw(s.q(`INSERT INTO {s}.insight_watch (one, watermark, at, vxids, since, xmins) VALUES (true, ?, ?, ?, ?, ?)
			ON CONFLICT (one) DO UPDATE SET watermark = excluded.watermark, at = excluded.at, vxids = excluded.vxids,
				since = excluded.since, xmins = excluded.xmins`),
			next.Watermark, next.At, pgdialect.Array(next.Vxids), pgdialect.Array(next.Since), pgdialect.Array(next.Xmins)).Exec(ctx)
		return err
	})
	marked := err == nil
	for err == nil {
		var rolled int
		if rolled, err = s.rollChunk(ctx, graph, background, settling, timeout()); rolled < rollChunk || time.Since(began) >= budget {
			break
		}
	}
	switch {
	case !background && hasCode(err, queryCanceled): // the rest is the sweep's
	case err != nil:
		return 0, fmt.Errorf("rolling the insights: %w", err)
	}
	var left int
	err = s.db.NewRaw(s.q(`SELECT count(DISTINCT (graph_version, minute)) FROM {s}.insight_marks WHERE ? = '' OR graph_name = ?`),
		graph, graph).Scan(ctx, &left)
	if !marked {
		left = max(left, 1) // what changed since the watermark is not even marked yet
	}
	return left, err
}

// rollChunk brings up to date the cells of up to rollChunk claimed minutes of graph ("" for
// every graph), oldest first, in one transaction, and returns how many. In the background, it
// leaves the current and the last minute, the minutes rolled less than rollWeight times their
// last roll's time ago, and those settling. A timeout, if not 0, bounds its statements.
func (s *Store) rollChunk(ctx context.Context, graph string, background bool, settling []markedMinute, timeout time.Duration) (int, error) {
	var n int
	err := s.rollTx(ctx, timeout, func(ctx context.Context, tx bun.Tx) error {
		var marks []markedMinute
		err := tx.NewRaw(s.q(`DELETE FROM {s}.insight_marks WHERE (graph_name, graph_version, minute, claimed) IN (
				SELECT m.graph_name, m.graph_version, m.minute, m.claimed FROM {s}.insight_marks m
					LEFT JOIN {s}.insight_minutes r USING (graph_name, graph_version, minute)
				WHERE m.claimed AND (? = '' OR m.graph_name = ?)
					AND (NOT ? OR (m.minute < date_trunc('minute', coalesce(?::timestamptz, now())) - interval '1 minute'
						AND (r.rolled_at IS NULL OR r.rolled_at + ? * r.cost_ms * interval '1 millisecond' <= coalesce(?::timestamptz, now()))
						AND (m.graph_name, m.graph_version, m.minute) NOT IN (SELECT g, v, m FROM unnest(?::text[], ?::text[], ?::timestamptz[]) AS u(g, v, m))))
				ORDER BY m.minute LIMIT ?)
			RETURNING graph_name, graph_version, minute`),
			append(append([]any{graph, graph, background, s.clock.NowOrNil(), rollWeight, s.clock.NowOrNil()}, minuteArrays(settling)...),
				rollChunk)...).Scan(ctx, &marks)
		if err != nil && !isNoRows(err) {
			return err
		}
		if n = len(marks); n == 0 {
			return nil
		}
		b := minuteArrays(marks)
		began := time.Now()
		if _, err := tx.NewRaw(s.q(`DELETE FROM {s}.insight_cells c USING unnest(?::text[], ?::text[], ?::timestamptz[]) AS b(g, v, m)
			WHERE c.graph_name = b.g AND c.minute = b.m AND c.graph_version = b.v`), b...).Exec(ctx); err != nil {
			return err
		}
		if s.citus {
			err = s.rollLanes(ctx, tx, b)
		} else {
			_, err = tx.NewRaw(s.q(rollSQL), b...).Exec(ctx)
		}
		if err != nil {
			return err
		}
		_, err = tx.NewRaw(s.q(`INSERT INTO {s}.insight_minutes (graph_name, graph_version, minute, rolled_at, cost_ms)
			SELECT g, v, m, coalesce(?::timestamptz, now()), ? FROM unnest(?::text[], ?::text[], ?::timestamptz[]) AS b(g, v, m)
			ON CONFLICT (graph_name, graph_version, minute) DO UPDATE SET rolled_at = excluded.rolled_at, cost_ms = excluded.cost_ms`),
			append([]any{s.clock.NowOrNil(), time.Since(began).Milliseconds()}, b...)...).Exec(ctx)
		return err
	})
	return n, err
}

// rollTx runs fn in a transaction that holds the roll's lock, one roll at a time per schema. A
// timeout, if not 0, bounds its statements, the wait for the lock included. jit is off: the
// planner's guess of a chunk's size lifts its cost over jit_above_cost, and compiling took longer
// than the statement (the runtime's own connections have it off already).
func (s *Store) rollTx(ctx context.Context, timeout time.Duration, fn func(ctx context.Context, tx bun.Tx) error) error {
	return s.db.RunInTx(ctx, readCommitted, func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.ExecContext(ctx, "SELECT set_config('jit', 'off', true), set_config('statement_timeout', ?, true)",
			strconv.FormatInt(timeout.Milliseconds(), 10))
		if err == nil {
			_, err = tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", s.rollLockKey())
		}
		if err != nil {
			return err
		}
		return fn(ctx, tx)
	})
}

// rollSQL computes the cells of the minutes given as three arrays (graph, version, minute) from
// the executions that started in them, their values and their attempts (see migration 0021).
// Each execution's rows are found through its index, one lateral join each (OFFSET 0 keeps it
// so): the planner takes a minute for 5,000 executions, and read every value of the table.
//
// An execution that failed for good ends at the node that failed, the first whose newest attempt
// failed or was abandoned: its measure "failed" counts it there, at the minute it failed, and its
// last value is no measure "ended".
var rollSQL = strings.ReplaceAll(binnedSQL, "{pin}", "") + cellsSQL

// binnedSQL is rollSQL's counts of each cell's bins, in the CTE binned, from the executions in
// one lane ({pin} a lanePin) or in all ("").
var binnedSQL = `WITH e AS (
		SELECT x.lane, x.id, b.g, b.v, b.m, x.created_at, x.archived
		FROM unnest(?::text[], ?::text[], ?::timestamptz[]) AS b(g, v, m),
			LATERAL (SELECT lane, id, created_at, archived_at IS NOT NULL AS archived FROM {s}.executions
				WHERE graph_name = b.g AND graph_version = b.v AND created_at >= b.m AND created_at < b.m + interval '1 minute'{pin}
				OFFSET 0) x),
	vals AS (SELECT e.id, e.g, e.v, e.m, e.created_at, e.archived, x.node, x.set_at, x.first_at
		FROM e, LATERAL (SELECT v.node, v.set_at, least(v.set_at, (SELECT min(h.changed_at) FROM {s}.value_history h
					WHERE h.lane = e.lane AND h.execution_id = e.id AND h.node = v.node AND h.value IS NOT NULL{pin})) AS first_at
			FROM {s}.nodes v WHERE v.lane = e.lane AND v.execution_id = e.id AND v.value_rev IS NOT NULL{pin} OFFSET 0) x),
	last AS (SELECT DISTINCT ON (id) id, g, v, m, archived, node, set_at FROM vals ORDER BY id, set_at DESC, node),
	att AS (SELECT e.id, e.g, e.v, e.m, e.archived, c.cid, c.node, c.state, c.claimed_at, c.finished_at
		FROM e, LATERAL (SELECT attempt_id AS cid, node, state, claimed_at, finished_at FROM {s}.attempts
				WHERE lane = e.lane AND execution_id = e.id{pin}
			UNION ALL SELECT attempt_id, node, state, claimed_at, finished_at FROM {s}.nodes
				WHERE lane = e.lane AND execution_id = e.id AND attempt_id IS NOT NULL{pin} OFFSET 0) c),
	ran AS (SELECT id, g, v, m, archived, node, state, finished_at, finished_at - claimed_at AS run FROM att
		WHERE state IN ('SUCCESS', 'FAILED', 'ABANDONED')),
	newest AS (SELECT DISTINCT ON (id, node) id, g, v, m, archived, node, state, coalesce(finished_at, m) AS finished_at
		FROM att ORDER BY id, node, cid DESC),
	failed AS (SELECT DISTINCT ON (id) id, g, v, m, archived, node, finished_at FROM newest
		WHERE state IN ('FAILED', 'ABANDONED') ORDER BY id, finished_at, node),
	facts AS (
		SELECT e.g, e.v, e.m, e.archived, 'executions' AS measure, '' AS node, e.m AS at, l.set_at - e.created_at AS d, NULL AS state
		FROM e LEFT JOIN last l ON l.id = e.id
		UNION ALL SELECT g, v, m, archived, 'reached', node, m, first_at - created_at, NULL FROM vals
		UNION ALL SELECT l.g, l.v, l.m, l.archived, 'ended', l.node, date_trunc('second', l.set_at), NULL, NULL FROM last l
			WHERE NOT EXISTS (SELECT FROM failed f WHERE f.id = l.id)
		UNION ALL SELECT g, v, m, archived, 'failed', node, date_trunc('minute', finished_at), NULL, NULL FROM failed
		UNION ALL SELECT g, v, m, archived, 'ran', node, m, run, state FROM ran
		UNION ALL SELECT g, v, m, archived, 'finished', '', date_trunc('minute', finished_at), run, state FROM ran),
	binned AS (SELECT g, v, m, archived, measure, node, at, ` + binOf("d") + ` AS bin, count(*) AS n,
			count(*) FILTER (WHERE state = 'SUCCESS') AS succeeded, count(*) FILTER (WHERE state = 'FAILED') AS failed,
			count(*) FILTER (WHERE state = 'ABANDONED') AS abandoned
		FROM facts GROUP BY 1, 2, 3, 4, 5, 6, 7, 8) `

// cellsSQL writes the cells of binned.
const cellsSQL = `INSERT INTO {s}.insight_cells (graph_name, minute, graph_version, archived, measure, node, at, n, failed, abandoned, bins, counts)
	SELECT g, m, v, archived, measure, node, at, CASE measure WHEN 'finished' THEN sum(succeeded) ELSE sum(n) END,
		sum(failed), sum(abandoned), array_agg(bin ORDER BY bin) FILTER (WHERE bin IS NOT NULL),
		array_agg(n ORDER BY bin) FILTER (WHERE bin IS NOT NULL)
	FROM binned GROUP BY 1, 2, 3, 4, 5, 6, 7`

// binnedRow is a row of binnedSQL's binned. Bin is noBin where the row's duration is NULL.
type binnedRow struct {
	G         string    `bun:"g"`
	V         string    `bun:"v"`
	M         time.Time `bun:"m"`
	Archived  bool      `bun:"archived"`
	Measure   string    `bun:"measure"`
	Node      string    `bun:"node"`
	At        time.Time `bun:"at"`
	Bin       int16     `bun:"bin"`
	N         int64     `bun:"n"`
	Succeeded int64     `bun:"succeeded"`
	Failed    int64     `bun:"failed"`
	Abandoned int64     `bun:"abandoned"`
}

const noBin = math.MinInt16

// rollLanes is rollSQL on Citus, for the minutes b (three arrays: graph, version, minute): it
// counts the bins of each lane in a statement sent to that lane's shard alone (the lateral joins
// that find an execution's rows cannot be planned across shards), adds the lanes' counts up, and
// writes the cells.
func (s *Store) rollLanes(ctx context.Context, tx bun.Tx, b []any) error {
	lanes, err := s.lanesWith(ctx, tx, `SELECT e.lane FROM {s}.executions e
		WHERE e.graph_name = ANY(?::text[]) AND e.graph_version = ANY(?::text[])
			AND e.created_at >= (SELECT min(m) FROM unnest(?::timestamptz[]) m) AND e.created_at < (SELECT max(m) FROM unnest(?::timestamptz[]) m) + interval '1 minute'`,
		b[0], b[1], b[2], b[2])
	if err != nil {
		return err
	}
	type cell struct {
		g, v, measure, node string
		m, at               time.Time
		archived            bool
		bin                 int16
	}
	sums := map[cell]*binnedRow{}
	var order []*binnedRow
	for _, lane := range lanes {
		var rows []binnedRow
		err := tx.NewRaw(s.q(strings.ReplaceAll(binnedSQL, "{pin}", lanePin("", lane))+`SELECT g, v, m, archived, measure, node, at,
			coalesce(bin, ?) AS bin, n, succeeded, failed, abandoned FROM binned`), append(b, noBin)...).Scan(ctx, &rows)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("counting the insights of lane %d: %w", lane, err)
		}
		for _, r := range rows {
			k := cell{r.G, r.V, r.Measure, r.Node, r.M.UTC(), r.At.UTC(), r.Archived, r.Bin}
			if sum, ok := sums[k]; ok {
				sum.N, sum.Succeeded, sum.Failed, sum.Abandoned = sum.N+r.N, sum.Succeeded+r.Succeeded, sum.Failed+r.Failed, sum.Abandoned+r.Abandoned
				continue
			}
			sums[k], order = &r, append(order, &r)
		}
	}
	if len(order) == 0 {
		return nil
	}
	var c struct {
		g, v, measure, node []string
		m, at               []time.Time
		archived            []bool
		bin                 []int16
		n, ok, failed, ab   []int64
	}
	for _, r := range order {
		c.g, c.v, c.measure, c.node = append(c.g, r.G), append(c.v, r.V), append(c.measure, r.Measure), append(c.node, r.Node)
		c.m, c.at, c.archived, c.bin = append(c.m, r.M), append(c.at, r.At), append(c.archived, r.Archived), append(c.bin, r.Bin)
		c.n, c.ok, c.failed, c.ab = append(c.n, r.N), append(c.ok, r.Succeeded), append(c.failed, r.Failed), append(c.ab, r.Abandoned)
	}
	_, err = tx.NewRaw(s.q(`WITH binned AS (SELECT g, v, m, archived, measure, node, at, nullif(bin, ?) AS bin, n, succeeded, failed, abandoned
			FROM unnest(?::text[], ?::text[], ?::timestamptz[], ?::bool[], ?::text[], ?::text[], ?::timestamptz[], ?::smallint[],
				?::bigint[], ?::bigint[], ?::bigint[], ?::bigint[]) AS b(g, v, m, archived, measure, node, at, bin, n, succeeded, failed, abandoned)) `+cellsSQL),
		noBin, pgdialect.Array(c.g), pgdialect.Array(c.v), pgdialect.Array(c.m), pgdialect.Array(c.archived),
		pgdialect.Array(c.measure), pgdialect.Array(c.node), pgdialect.Array(c.at), pgdialect.Array(c.bin),
		pgdialect.Array(c.n), pgdialect.Array(c.ok), pgdialect.Array(c.failed), pgdialect.Array(c.ab)).Exec(ctx)
	return err
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

// The limits of an InsightsQuery: a window or a bucket of 100 years at most, and a series of
// MaxInsightsBuckets buckets at most, which the default bucket never exceeds. Beyond, the window's
// arithmetic overflows a time.Duration, or the series would not fit in memory.
const (
	MaxInsightsWindow  = 100 * 365 * 24 * time.Hour
	MaxInsightsBuckets = 10_000
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
