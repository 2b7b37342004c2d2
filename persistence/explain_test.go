package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// statementLog records the statements that a store sends: those of bun, as they were sent (their
// arguments in their text), and those of pgx, with their arguments apart.
type statementLog struct {
	mu      sync.Mutex
	sent    []statement
	since   int
	batches int
}

type statement struct {
	sql   string
	args  []any // nil for bun's
	batch int   // the number of its pgx batch, from 1; 0 for a statement sent alone
}

func (l *statementLog) add(sql string, args []any, batch int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = append(l.sent, statement{sql, args, batch})
}

func (l *statementLog) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context {
	return ctx
}

func (l *statementLog) AfterQuery(_ context.Context, e *bun.QueryEvent) { l.add(e.Query, nil, 0) }

// TraceQueryStart, TraceQueryEnd, TraceBatchStart, TraceBatchQuery and TraceBatchEnd make it a
// pgx.BatchTracer. A statement bun sends reaches pgx too: it is recorded once, by bun's hook.
func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	// database/sql's statements (bun's) come with options first: a result format, a mode.
	if len(d.Args) == 0 || !isOption(d.Args[0]) {
		l.add(d.SQL, d.Args, 0)
	}
	return ctx
}

func isOption(arg any) bool {
	switch arg.(type) {
	case pgx.QueryExecMode, pgx.QueryResultFormatsByOID, pgx.QueryResultFormats:
		return true
	}
	return false
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *statementLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches++
	return ctx
}

func (l *statementLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	l.mu.Lock()
	batch := l.batches
	l.mu.Unlock()
	l.add(d.SQL, d.Args, batch)
}

func (l *statementLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// take returns the statements sent since the last take that a plan can be explained for.
func (l *statementLog) take() []statement {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []statement
	for _, st := range l.sent[l.since:] {
		switch strings.ToUpper(strings.Fields(st.sql)[0]) {
		case "SELECT", "WITH", "UPDATE", "INSERT", "DELETE":
			out = append(out, st)
		}
	}
	l.since = len(l.sent)
	return out
}

// roundTrips returns the round trips taken since the last take, and takes them: a pgx batch is
// one, and so is each statement sent alone. The notes, sent after the commit, are not counted.
func (l *statementLog) roundTrips() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, batches := 0, map[int]bool{}
	for _, st := range l.sent[l.since:] {
		if strings.Contains(st.sql, "pg_notify") {
			continue // the notes, after the commit, on a connection of their own
		}
		if st.batch == 0 || !batches[st.batch] {
			n++
			batches[st.batch] = true
		}
	}
	l.since = len(l.sent)
	return n
}

// explain returns the plan of st, in JSON and read. A statement of pgx is explained as the
// runtime runs it: prepared, with the generic plan that plan_cache_mode=force_generic_plan makes
// once for every call.
func explain(ctx context.Context, t *testing.T, conn *pgx.Conn, st statement) (string, planNode) {
	t.Helper()
	raw := explainJSON(ctx, t, conn, st)
	var plans []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal([]byte(raw), &plans))
	return raw, plans[0].Plan
}

func explainJSON(ctx context.Context, t *testing.T, conn *pgx.Conn, st statement) string {
	t.Helper()
	return explainWith(ctx, t, conn, st, "FORMAT JSON")
}

// explainWith returns what EXPLAIN (options) says of st, as explain runs it.
func explainWith(ctx context.Context, t *testing.T, conn *pgx.Conn, st statement, options string) string {
	t.Helper()
	var raw string
	if st.args == nil {
		require.NoError(t, conn.QueryRow(ctx, "EXPLAIN ("+options+") "+st.sql, pgx.QueryExecModeSimpleProtocol).Scan(&raw), st.sql)
		return raw
	}
	_, err := conn.Exec(ctx, "PREPARE explained AS "+st.sql)
	require.NoError(t, err, st.sql)
	defer func() { _, _ = conn.Exec(ctx, "DEALLOCATE explained") }()
	params := make([]string, len(st.args))
	for i := range params {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	// EXECUTE takes no parameters of the extended protocol: pgx writes the arguments in.
	args := append([]any{pgx.QueryExecModeSimpleProtocol}, st.args...)
	require.NoError(t, conn.QueryRow(ctx, "EXPLAIN ("+options+") EXECUTE explained("+strings.Join(params, ", ")+")",
		args...).Scan(&raw), st.sql)
	return raw
}

// planNode is a node of a plan of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Alias    string     `json:"Alias"`
	Index    string     `json:"Index Name"`
	Plans    []planNode `json:"Plans"`
	// Of EXPLAIN ANALYZE: the rows a node returned and those its filter removed, each an
	// average over its loops.
	Rows     float64 `json:"Actual Rows"`
	Loops    float64 `json:"Actual Loops"`
	Filtered float64 `json:"Rows Removed by Filter"`
}

// rowsRead returns the rows that the plan's scans of relation read, those their filters removed
// included, over all their loops.
func (n planNode) rowsRead(relation string) float64 {
	read := 0.0
	if n.Relation == relation {
		read = (n.Rows + n.Filtered) * n.Loops
	}
	for _, c := range n.Plans {
		read += c.rowsRead(relation)
	}
	return read
}

// scans adds the relations a plan reads whole to seq, and the indexes it reads to indexes.
func (n planNode) scans(seq, indexes map[string]bool) {
	if n.NodeType == "Seq Scan" {
		seq[n.Relation] = true
	}
	if n.Index != "" {
		indexes[n.Index] = true
	}
	for _, c := range n.Plans {
		c.scans(seq, indexes)
	}
}

// has reports whether the plan has a node of type typ.
func (n planNode) has(typ string) bool {
	return n.NodeType == typ || slices.ContainsFunc(n.Plans, func(c planNode) bool { return c.has(typ) })
}

// The statements that run all the time, whatever the table holds (the claim, the heartbeat, the
// sweep's selection of expired attempts and the promotion) find the active attempts through the
// partial indexes of the active states, and the executions by key: they never scan the finished
// rows, so that a table of a million finished attempts costs them what an empty one does. A keyed
// Start, and FindByKey, find the holder of a key in executions_key_idx.
func TestHotStatementsUseThePartialIndexes(t *testing.T) {
	t.Parallel()
	const finished = 5000
	b := setup(t)
	ctx := context.Background()
	// Finished executions, each with its values and its successful attempt.
	b.exec(t, `INSERT INTO {s}.executions (lane, id, graph_name, graph_version, key)
		SELECT 0, 'finished-' || g, 'store', 'v1', 'key-' || g FROM generate_series(1, ?) g`, finished)
	b.exec(t, `INSERT INTO {s}.nodes (lane, execution_id, node, graph_key, rev, changed_at, value, value_rev, set_at)
		SELECT 0, 'finished-' || g, 'x', 'store@v1', 1, now(), '1', 1, now() FROM generate_series(1, ?) g`, finished)
	b.exec(t, `INSERT INTO {s}.nodes (lane, execution_id, node, graph_key, rev, changed_at, value, value_rev, set_at,
			attempt_id, state, attempt, max_attempts, run_at, abandon_after_ms, heartbeat_timeout_ms, created_at, finished_at)
		SELECT 0, 'finished-' || g, 'y', 'store@v1', 2, now(), '1', 2, now(), g, 'SUCCESS', 1, 2, now(), 10000, 3000, now(), now()
		FROM generate_series(1, ?) g`, finished)
	// A few active attempts of each state: running, available, and pending until later.
	b.ready(t, 20)
	claimed, err := b.store.Claim(ctx, "r1", 10)
	require.NoError(t, err)
	require.Len(t, claimed, 10)
	beat(t, b.store, "r1", time.Minute, true)
	b.exec(t, `UPDATE {s}.nodes SET state = 'PENDING', run_at = now() + interval '1 hour'
		WHERE (lane, execution_id, node) IN (SELECT lane, execution_id, node FROM {s}.nodes WHERE state = 'AVAILABLE' ORDER BY attempt_id LIMIT 5)`)
	b.exec(t, `ANALYZE {s}.executions, {s}.nodes`)

	s, log, explainer := b.tracedStore(t)
	asRun := planner(t, PlanSettings) // plans as the runtime's connections do

	refs := make([]ClaimRef, len(claimed))
	for i, c := range claimed {
		refs[i] = c.Ref()
	}
	for _, op := range []struct {
		name  string
		run   func() error
		index string // the prefix of the name of an index that one of its statements must use
		avoid string // the prefix of the names of indexes that none of its statements may use
	}{
		{"claim", func() error { _, err := s.Claim(ctx, "r2", 2); return err }, "nodes_claim_idx", ""},
		// A heartbeat and an outcome find their rows through the primary key: a partial index on
		// RUNNING attempts would read every running attempt of the replica for each row.
		{"heartbeat", func() error { _, err := s.Heartbeat(ctx, "r1", refs); return err }, "nodes_pkey", "nodes_running_"},
		{"record", func() error {
			lost, err := s.Record(ctx, []Outcome{{C: claimed[0], Result: json.RawMessage(`1`)}})
			if err == nil {
				err = lost[0]
			}
			return err
		}, "nodes_pkey", "nodes_running_"},
		{"sweep", func() error {
			_, err := s.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 100})
			return err
		}, "nodes_running_", ""},
		{"promotion", func() error { _, err := s.PromoteDue(ctx); return err }, "nodes_pending_idx", ""},
		{"keyed start", func() error {
			execs, err := s.CreateExecutions(ctx, b.g, []map[string]json.RawMessage{{"x": json.RawMessage(`1`)}, nil},
				[]string{"key-1", "key-new"}, nil, nil)
			if err == nil && (!execs[0].Existing || execs[1].Existing) {
				err = fmt.Errorf("key-1 is held and key-new is not, got %+v and %+v", execs[0], execs[1])
			}
			return err
		}, "executions_key_idx", ""},
		{"find by key", func() error { _, err := s.FindByKey(ctx, "store", "key-2"); return err }, "executions_key_idx", ""},
	} {
		require.NoError(t, op.run(), op.name)
		statements := log.take()
		require.NotEmpty(t, statements, op.name)
		used := false
		for _, st := range statements {
			raw, plan := explain(ctx, t, explainer, st)
			seq, indexes := map[string]bool{}, map[string]bool{}
			plan.scans(seq, indexes)
			t.Logf("%s: indexes %v, sequential scans %v: %.160s", op.name, keys(indexes), keys(seq), oneLine(st.sql))
			require.False(t, seq["nodes"] || seq["executions"] || seq["attempts"],
				"%s: a sequential scan of a table that holds the finished rows:\n%s\n%s", op.name, st.sql, raw)
			for index := range indexes {
				used = used || strings.HasPrefix(index, op.index)
				require.False(t, op.avoid != "" && strings.HasPrefix(index, op.avoid),
					"%s: reads %s:\n%s\n%s", op.name, index, st.sql, raw)
			}
			// Rows found by key are read row by row, in the index's order: a bitmap is built
			// for each lookup, and loses that order.
			raw, plan = explain(ctx, t, asRun, st)
			require.False(t, plan.has("Bitmap Heap Scan"), "%s: a bitmap scan as the runtime plans it:\n%s\n%s",
				op.name, st.sql, raw)
		}
		require.True(t, used, "%s: no statement uses %s*", op.name, op.index)
	}
}

// A promotion pass costs what it promotes, not what waits: with 20,000 gated attempts waiting,
// 10,000 on ten concurrency keys and 10,000 on a node with a parallel limit, none of its
// statements reads more than a few rows of nodes per key and per node. Each read every
// waiting attempt once, when promotion chose the oldest of each key with DISTINCT ON, ranked every
// waiting attempt of each limited node, and found the ungated ones through the index of all the
// PENDING attempts: 12 ms a pass, under the promotion lock, in journey bench -graph gated with
// 10,000 waiting.
func TestPromotionReadsWhatItPromotes(t *testing.T) {
	t.Parallel()
	const waiting = 10000 // on each of the key and the limit
	g := keyedGraph("gate", graph.MaxParallel(5))
	b := setup(t, g)
	ctx := context.Background()
	// gate@v1: MaxParallel(5), keys k0…k9, three of them held, each key's attempts younger than
	// the last key's; lim@v1: MaxParallel(3), no key, one running; and two ungated attempts that
	// wait for their run_at, one of them due.
	b.exec(t, `INSERT INTO {s}.executions (lane, id, graph_name, graph_version)
		SELECT 0, p || g, 'gate', 'v1' FROM generate_series(1, ?) g, unnest(ARRAY['p-', 'l-']) p`, waiting)
	b.exec(t, `INSERT INTO {s}.executions (lane, id, graph_name, graph_version) VALUES (0, 'u-1', 'gate', 'v1'), (0, 'u-2', 'gate', 'v1')`)
	b.exec(t, `INSERT INTO {s}.nodes (execution_id, graph_key, node, state, attempt, max_attempts, run_at,
			abandon_after_ms, heartbeat_timeout_ms, concurrency_key, max_parallel, created_at, lane, rev, changed_at, attempt_id)
		SELECT a.id, a.gk, a.node, a.state, a.attempt, a.max_attempts, a.run_at, a.abandon_ms, a.beat_ms, a.ckey, a.maxp, a.created,
			0, 1, now(), row_number() OVER () FROM (SELECT 'p-' || g, 'gate@v1', 'job', 'PENDING', 1, 2, now() - interval '1 hour' + g * interval '1 ms',
			60000, 30000, 'k' || (g - 1) * 10 / ?, 5, now() FROM generate_series(1, ?) g
		UNION ALL
		SELECT 'l-' || g, 'lim@v1', 'job', 'PENDING', 1, 2, now() - interval '1 hour' + g * interval '1 ms',
			60000, 30000, NULL, 3, now() FROM generate_series(1, ?) g
		UNION ALL
		SELECT 'u-' || g, 'gate@v1', 'other', 'PENDING', 2, 2, now() + (g - 1.5) * interval '1 hour',
			60000, 30000, NULL, NULL, now() FROM generate_series(1, 2) g)
		AS a(id, gk, node, state, attempt, max_attempts, run_at, abandon_ms, beat_ms, ckey, maxp, created)`, waiting, waiting, waiting)
	b.exec(t, `UPDATE {s}.nodes SET state = 'RUNNING', replica_id = 'r1'
		WHERE execution_id IN ('p-1', 'p-1001', 'p-2001', 'l-1')`)
	b.exec(t, `ANALYZE {s}.executions, {s}.nodes`)

	s, log, explainer := b.tracedStore(t)
	promoted, err := s.PromoteDue(ctx)
	require.NoError(t, err)
	var available []string
	require.NoError(t, b.db.NewRaw(b.store.q(`SELECT execution_id FROM {s}.nodes WHERE state = 'AVAILABLE'
		ORDER BY execution_id`)).Scan(ctx, &available))
	require.Equal(t, []string{"l-2", "l-3", "p-3001", "p-4001", "u-1"}, available,
		"the due ungated attempt, and the oldest of the free keys and of the limited node that fit")
	require.Equal(t, 5, promoted)

	// The promoted ones finish: the statements are explained with room on the key and the limit.
	b.exec(t, `UPDATE {s}.nodes SET state = 'SUCCESS', finished_at = now() WHERE state = 'AVAILABLE'`)
	statements := log.take()
	require.NotEmpty(t, statements)
	for _, conn := range []*pgx.Conn{explainer, planner(t, PlanSettings)} {
		for _, st := range statements {
			raw, plan := explainAnalyze(ctx, t, conn, st)
			read := plan.rowsRead("nodes")
			t.Logf("%.0f rows of nodes read: %.160s", read, oneLine(st.sql))
			require.LessOrEqual(t, read, 100.0, "a statement of the promotion reads what waits:\n%s\n%s", st.sql, raw)
		}
	}
}

// A promotion reads what it promotes even on statistics made when few attempts waited. Its UPDATE
// had a state in its WHERE, and its plan then read the attempts it promotes through
// its pending index: every attempt that waits, 2,990 of 3,000.
func TestPromotionReadsWhatItPromotesOnStaleStatistics(t *testing.T) {
	t.Parallel()
	g := keyedGraph("stale")
	b := setup(t, g)
	ctx := context.Background()
	add := func(state string, from, to int) {
		b.exec(t, `INSERT INTO {s}.executions (lane, id, graph_name, graph_version)
			SELECT 0, 'p-' || g, 'stale', 'v1' FROM generate_series(?::int, ?::int) g`, from, to)
		b.exec(t, `INSERT INTO {s}.nodes (lane, execution_id, graph_key, node, rev, changed_at, attempt_id, state, attempt,
				max_attempts, run_at, abandon_after_ms, heartbeat_timeout_ms, concurrency_key, created_at)
			SELECT 0, 'p-' || g, 'stale@v1', 'job', 1, now(), g, ?, 1, 2, now() - interval '1 hour' + g * interval '1 ms',
				60000, 30000, 'k' || g % 10, now() FROM generate_series(?::int, ?::int) g`, state, from, to)
	}
	// Statistics of a table where few attempts wait among many finished; then many wait.
	add("SUCCESS", 1, 5000)
	add("PENDING", 5001, 5010)
	b.exec(t, `ANALYZE {s}.executions, {s}.nodes`)
	add("PENDING", 5011, 8000)

	s, log, _ := b.tracedStore(t)
	promoted, err := s.PromoteDue(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, promoted, "the oldest of each key")
	statements := log.take()
	require.NotEmpty(t, statements)
	conn := planner(t, PlanSettings)
	for _, st := range statements {
		raw, plan := explainAnalyze(ctx, t, conn, st)
		require.LessOrEqual(t, plan.rowsRead("nodes"), 100.0, "a statement of the promotion reads what waits:\n%s\n%s", st.sql, raw)
	}
}

// A claim reads what it claims, not the backlog, once statistics have seen the backlog: with
// 5,000 attempts waiting in 64 lanes, the claim of 100 reads a few hundred rows. Joined with the
// executions as the planner chose, the lanes' and the ids' selectivities multiplied made the
// join look a lane's count small, and every claim hashed and sorted the whole backlog: the
// drain's slow mode, up to 1.1 s a claim with 200,000 waiting.
func TestClaimReadsWhatItClaimsOnABacklogsStatistics(t *testing.T) {
	t.Parallel()
	const waiting = 5000
	g := graph.MustNew("backlog", "v1", []graph.Node{graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(context.Context, graph.Values) (any, error) { return 1, nil })})
	b := setup(t, g)
	ctx := context.Background()
	b.exec(t, `INSERT INTO {s}.executions (lane, id, graph_name, graph_version)
		SELECT g % 64, 'b-' || g, 'backlog', 'v1' FROM generate_series(1, ?) g`, waiting)
	b.exec(t, `INSERT INTO {s}.nodes (lane, execution_id, graph_key, node, rev, changed_at, attempt_id, state, attempt,
			max_attempts, run_at, abandon_after_ms, heartbeat_timeout_ms, created_at)
		SELECT g % 64, 'b-' || g, 'backlog@v1', 'y', 1, now(), g, 'AVAILABLE', 1, 1, now() - interval '1 hour' + g * interval '1 ms',
			60000, 30000, now() FROM generate_series(1, ?) g`, waiting)
	b.exec(t, `ANALYZE {s}.executions, {s}.nodes`)

	s, log, _ := b.tracedStore(t)
	claimed, err := s.Claim(ctx, "r1", 100)
	require.NoError(t, err)
	require.Len(t, claimed, 100)
	b.exec(t, `UPDATE {s}.nodes SET state = 'AVAILABLE' WHERE state = 'RUNNING'`) // for the explains to claim again
	statements := log.take()
	require.NotEmpty(t, statements)
	conn := planner(t, PlanSettings)
	for _, st := range statements {
		raw, plan := explainAnalyze(ctx, t, conn, st)
		for _, table := range []string{"nodes", "executions"} {
			require.LessOrEqual(t, plan.rowsRead(table), 400.0, "a statement of the claim reads the backlog's %s:\n%s\n%s", table, st.sql, raw)
		}
	}
}

// A delivery reads the delivery it takes, not the backlog: with 5,000 due, its statements read a
// few rows of each table. Joined whole, the backlog's deliveries and claims were hashed and sorted
// for each delivery (60 ms a delivery with 17,000 due), and a soak's 28,000 never drained.
func TestDeliveryReadsWhatItDelivers(t *testing.T) {
	t.Parallel()
	const due = 5000
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `INSERT INTO {s}.executions (lane, id, graph_name, graph_version)
		SELECT g % 16, 'e-' || g, 'store', 'v1' FROM generate_series(1, ?) g`, due)
	b.exec(t, `INSERT INTO {s}.notification_claims (lane, execution_id, event, phase, idempotency_key, claimed_at)
		SELECT g % 16, 'e-' || g, 'execution.completed', 0, 'e-' || g || ':completed', now() - interval '1 hour' + g * interval '1 ms'
		FROM generate_series(1, ?) g`, due)
	b.exec(t, `INSERT INTO {s}.notification_deliveries (lane, idempotency_key, target, next_attempt_at, created_at)
		SELECT lane, idempotency_key, 'handler', claimed_at, claimed_at FROM {s}.notification_claims`)
	b.exec(t, `ANALYZE {s}.executions, {s}.notification_claims, {s}.notification_deliveries`)

	s, log, explainer := b.tracedStore(t)
	s.routes = []string{Route{Event: "execution.completed", Target: TargetHandler}.String()}
	var sent *Notice
	state, err := s.DeliverOne(ctx, DeliveryPolicy{SendTimeout: time.Second, Backoff: func(int) time.Duration { return time.Second },
		Horizon: time.Hour}, func(_ context.Context, n *Notice) error { sent = n; return nil })
	require.NoError(t, err)
	require.Equal(t, DeliveryDelivered, state)
	require.Equal(t, "e-1", sent.ExecutionID, "the oldest due")
	require.Equal(t, "store", sent.GraphName)
	statements := log.take()
	require.NotEmpty(t, statements)
	for _, st := range statements {
		if strings.HasPrefix(st.sql, "SET ") {
			continue
		}
		raw, plan := explainAnalyze(ctx, t, explainer, st)
		for _, table := range []string{"notification_deliveries", "notification_claims", "executions"} {
			read := plan.rowsRead(table)
			t.Logf("%.0f rows of %s read: %.160s", read, table, oneLine(st.sql))
			require.LessOrEqual(t, read, 10.0, "a statement of the delivery reads the backlog:\n%s\n%s", st.sql, raw)
		}
	}
}

// explainAnalyze runs st with EXPLAIN ANALYZE, as explain plans it, in a transaction that it
// rolls back, and returns its plan, in JSON and read.
func explainAnalyze(ctx context.Context, t *testing.T, conn *pgx.Conn, st statement) (string, planNode) {
	t.Helper()
	_, err := conn.Exec(ctx, "BEGIN")
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(ctx, "ROLLBACK") }()
	raw := explainWith(ctx, t, conn, st, "ANALYZE, FORMAT JSON")
	var plans []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal([]byte(raw), &plans))
	return raw, plans[0].Plan
}

// tracedStore returns a store on b's schema whose statements log records, on a pool set up as
// the runtime's, and a connection that explains them.
func (b *bundle) tracedStore(t *testing.T) (*Store, *statementLog, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	log := &statementLog{}
	pcfg, err := pgxpool.ParseConfig(pgtest.URL(t))
	require.NoError(t, err)
	pcfg.ConnConfig.Tracer = log
	for name, value := range PlanSettings {
		pcfg.ConnConfig.RuntimeParams[name] = value
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db := bun.NewDB(OpenDB(pool), pgdialect.New()).WithQueryHook(log)
	s, err := New(Config{DB: db, Schema: b.schema, Graphs: []*graph.Graph{b.g}, Clock: b.clock, Logger: testLogger()})
	require.NoError(t, err)
	return s, log, planner(t, map[string]string{"plan_cache_mode": "force_generic_plan"})
}

// planner returns a connection, closed when the test ends, with settings set: one to explain
// statements as a connection with those settings plans them.
func planner(t *testing.T, settings map[string]string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for name, value := range settings {
		_, err = conn.Exec(ctx, "SET "+name+" = "+value)
		require.NoError(t, err)
	}
	return conn
}

// In a queue, the statistics go stale within seconds. Taken while every attempt was AVAILABLE,
// they made the claim's generic plan, when it took attempts by id, walk the primary key through
// every attempt finished since: the claim must find its attempts through its own index whatever
// the statistics say.
func TestClaimPlanWithStaleStatistics(t *testing.T) {
	t.Parallel()
	const attempts = 20000
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `INSERT INTO {s}.executions (lane, id, graph_name, graph_version)
		SELECT 0, 'e-' || g, 'store', 'v1' FROM generate_series(1, ?) g`, attempts)
	b.exec(t, `INSERT INTO {s}.nodes (lane, execution_id, graph_key, node, rev, changed_at, attempt_id, state, attempt,
			max_attempts, run_at, abandon_after_ms, heartbeat_timeout_ms, created_at, computed_with)
		SELECT 0, 'e-' || g, 'store@v1', 'y', 1, now(), g, 'AVAILABLE', 1, 2, now(), 10000, 3000, now(), '{}'
		FROM generate_series(1, ?) g`, attempts)
	b.exec(t, `ANALYZE {s}.executions, {s}.nodes`)
	b.exec(t, `UPDATE {s}.nodes SET state = 'SUCCESS', finished_at = now() WHERE attempt_id <= ?`, attempts-20)

	s, log, explainer := b.tracedStore(t)
	claimed, err := s.Claim(ctx, "r1", 10)
	require.NoError(t, err)
	require.Len(t, claimed, 10)
	statements := log.take()
	require.Len(t, statements, 3, "the pick; then the claim of what it picked, and the read of its values")
	for _, st := range statements {
		raw, plan := explain(ctx, t, explainer, st)
		seq, indexes := map[string]bool{}, map[string]bool{}
		plan.scans(seq, indexes)
		require.Empty(t, seq, raw)
	}
	raw, plan := explain(ctx, t, explainer, statements[0])
	require.Equal(t, "nodes_claim_idx", plan.indexOf("n"), raw)
}

// indexOf returns the index through which the plan reads the relation of alias, or "" if none.
func (n planNode) indexOf(alias string) string {
	if n.Alias == alias && n.Index != "" {
		return n.Index
	}
	for _, c := range n.Plans {
		if index := c.indexOf(alias); index != "" {
			return index
		}
	}
	return ""
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func oneLine(q string) string { return strings.Join(strings.Fields(q), " ") }
