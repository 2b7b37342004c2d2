package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// monitor is bench's own connection to the database: it creates and drops the schema, inserts
// the finished rows, reads the statistics and checks the executions. It speaks the simple
// protocol, in which each statement is one transaction, and counts them, so that they can be
// left out of the replicas' transactions.
type monitor struct {
	cfg   *pgx.ConnConfig
	conn  *pgx.Conn
	txs   int64  // statements run, each its own transaction
	dbid  uint32 // the database's oid, by which pg_stat_statements is filtered
	stats string // the schema of pg_stat_statements, quoted; empty when it cannot be read
	// counted, if set, is called with each count of waitNone: a test's hook.
	counted func(n int)
}

// benchStats is a snapshot of the database's statistics.
type benchStats struct {
	transactions int64 // committed and rolled back, in the database
	monitorTxs   int64 // the monitor's own, before the snapshot's read
	calls        int64 // statements run since the reset; -1 without pg_stat_statements
	heartbeats   int64 // of which the replicas' heartbeat UPDATEs; -1 without pg_stat_statements
	others       int   // sessions in the database besides the monitor's
}

// statementCalls is a statement from pg_stat_statements.
type statementCalls struct {
	calls  int64
	meanMs float64
	planMs float64 // the mean planning time
	query  string
}

func connectMonitor(ctx context.Context, url string) (*monitor, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parsing DATABASE_URL: %w", err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cfg.RuntimeParams["application_name"] = benchAppName + "-monitor"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	m := &monitor{cfg: cfg, conn: conn}
	if err := m.queryRow(ctx, "SELECT oid FROM pg_database WHERE datname = current_database()", nil, &m.dbid); err != nil {
		m.close()
		return nil, fmt.Errorf("reading the database's oid: %w", err)
	}
	return m, nil
}

// serverCPU returns the CPU that the PostgreSQL server has used so far, all its processes (see
// processTreeCPU), when it runs on this machine; else -1. Its postmaster's pid is the first line
// of postmaster.pid in its data_directory, which a superuser (or pg_read_all_settings) can read.
func (m *monitor) serverCPU(ctx context.Context) time.Duration {
	var dir string
	if err := m.queryRow(ctx, "SELECT current_setting('data_directory')", nil, &dir); err != nil {
		return -1
	}
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return -1
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return -1
	}
	return processTreeCPU(pid)
}

func (m *monitor) close() { _ = m.conn.Close(context.Background()) }

func (m *monitor) exec(ctx context.Context, sql string, args ...any) error {
	m.txs++
	_, err := m.conn.Exec(ctx, sql, args...)
	return err
}

func (m *monitor) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	m.txs++
	return m.conn.QueryRow(ctx, sql, args...).Scan(dest...)
}

// describe names the server and database, without credentials.
func (m *monitor) describe() string {
	c := m.conn.Config()
	return fmt.Sprintf("%s:%d/%s", c.Host, c.Port, c.Database)
}

// createSchema creates the schema bench works in: *name, or a fresh name when *name is empty.
func (m *monitor) createSchema(ctx context.Context, name *string) error {
	if *name == "" {
		*name = randomName("journey_bench_")
	}
	err := m.exec(ctx, "CREATE SCHEMA "+pgx.Identifier{*name}.Sanitize())
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "42P06" /* duplicate_schema */ {
		return fmt.Errorf("schema %q exists: bench works in a schema of its own, which it creates and drops; "+
			"give -schema a name that is not taken, or leave it out", *name)
	}
	if err != nil {
		return fmt.Errorf("creating schema %q: %w", *name, err)
	}
	return nil
}

// dropSchema drops the schema bench worked in, even when ctx has ended, on a new connection if
// the end of ctx closed the monitor's.
func (m *monitor) dropSchema(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if m.conn.IsClosed() {
		conn, err := pgx.ConnectConfig(ctx, m.cfg)
		if err != nil {
			return fmt.Errorf("dropping schema %q: %w", name, err)
		}
		m.conn = conn
	}
	if err := m.exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("dropping schema %q: %w", name, err)
	}
	return nil
}

// enableStatements creates the extension pg_stat_statements if the server loads its library.
// When it cannot, it returns false and says why.
func (m *monitor) enableStatements(ctx context.Context) (bool, string) {
	var libraries string
	if err := m.queryRow(ctx, "SELECT current_setting('shared_preload_libraries')", nil, &libraries); err != nil {
		return false, fmt.Sprintf("reading shared_preload_libraries: %v", err)
	}
	if !strings.Contains(libraries, "pg_stat_statements") {
		return false, "the server does not load pg_stat_statements (add it to shared_preload_libraries)"
	}
	if err := m.exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return false, fmt.Sprintf("creating the extension pg_stat_statements: %v", err)
	}
	err := m.queryRow(ctx, "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_stat_statements'",
		nil, &m.stats)
	if err != nil {
		return false, fmt.Sprintf("finding the extension pg_stat_statements: %v", err)
	}
	return true, ""
}

// waitReplicasGone waits until no connection of a replica is left, so that their statistics,
// which a session reports when it ends, are in. After 30s it returns how many are left.
func (m *monitor) waitReplicasGone(ctx context.Context) (int, error) {
	n, err := m.waitNone(ctx, 30*time.Second,
		"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1", benchAppName)
	if err != nil {
		return n, fmt.Errorf("counting the replicas' connections: %w", err)
	}
	return n, nil
}

// othersTimeout bounds how long snapshot waits for the other sessions in the database to end. A
// session that has just closed lingers for a moment, longer on a busy machine: the throwaway
// cluster's readiness checks, or a check that gave up while the server was starting.
const othersTimeout = 3 * time.Second

// waitNone runs the count query until it counts none, or timeout has passed, and returns the
// last count.
func (m *monitor) waitNone(ctx context.Context, timeout time.Duration, count string, args ...any) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		var n int
		if err := m.queryRow(ctx, count, args, &n); err != nil {
			return n, err
		}
		if m.counted != nil {
			m.counted(n)
		}
		if n == 0 || time.Now().After(deadline) {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// snapshot reads the transactions of the database and, when pg_stat_statements can be read,
// the calls of its statements. The first snapshot (reset true) resets the statements of this
// database first.
func (m *monitor) snapshot(ctx context.Context, reset bool) (benchStats, error) {
	s := benchStats{calls: -1, heartbeats: -1}
	var err error
	s.others, err = m.waitNone(ctx, othersTimeout, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "+
		"AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
	if err != nil {
		return s, fmt.Errorf("counting the sessions in the database: %w", err)
	}
	if reset && m.stats != "" {
		if err := m.exec(ctx, "SELECT "+m.stats+".pg_stat_statements_reset(0, $1, 0)", m.dbid); err != nil {
			return s, fmt.Errorf("resetting pg_stat_statements: %w", err)
		}
	}
	// A session reports its statistics when idle, at most once a second: make this one report
	// its own transactions now, so that the count below includes them all (PostgreSQL 15+).
	_ = m.exec(ctx, "SELECT pg_stat_force_next_flush()")
	s.monitorTxs = m.txs
	err = m.queryRow(ctx, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()",
		nil, &s.transactions)
	if err != nil {
		return s, fmt.Errorf("reading pg_stat_database: %w", err)
	}
	if m.stats != "" {
		err := m.queryRow(ctx, "SELECT coalesce(sum(calls), 0)::bigint FROM "+m.stats+".pg_stat_statements "+
			"WHERE dbid = $1 AND query NOT LIKE '%pg_stat%'", []any{m.dbid}, &s.calls)
		if err != nil {
			return s, fmt.Errorf("reading pg_stat_statements: %w", err)
		}
		// The heartbeat UPDATE is the one statement that starts its SET with heartbeat_deadline.
		err = m.queryRow(ctx, "SELECT coalesce(sum(calls), 0)::bigint FROM "+m.stats+".pg_stat_statements "+
			"WHERE dbid = $1 AND regexp_replace(query, '\\s+', ' ', 'g') LIKE '%nodes n SET heartbeat_deadline =%' "+
			"AND query NOT LIKE '%pg_stat%'", []any{m.dbid}, &s.heartbeats)
		if err != nil {
			return s, fmt.Errorf("reading the heartbeat statements from pg_stat_statements: %w", err)
		}
	}
	return s, nil
}

// tableWrites are the rows a table had inserted, updated (of which HOT: without new index
// entries) and deleted.
type tableWrites struct{ ins, upd, hot, del int64 }

func (w tableWrites) total() int64 { return w.ins + w.upd + w.del }

// rowWrites returns the row writes of each table of schema but the migrations' own, as
// pg_stat_user_tables counts them. A session reports its writes when it ends, or when idle, at
// most once a second: the counts leave out what live sessions have not reported yet.
func (m *monitor) rowWrites(ctx context.Context, schema string) (map[string]tableWrites, error) {
	_ = m.exec(ctx, "SELECT pg_stat_force_next_flush()") // this session's, for what it inserted
	m.txs++
	rows, err := m.conn.Query(ctx, `SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
		FROM pg_stat_user_tables WHERE schemaname = $1 AND relname NOT LIKE 'bun\_%'`, schema)
	if err != nil {
		return nil, fmt.Errorf("reading pg_stat_user_tables: %w", err)
	}
	defer rows.Close()
	writes := map[string]tableWrites{}
	for rows.Next() {
		var table string
		var w tableWrites
		if err := rows.Scan(&table, &w.ins, &w.upd, &w.hot, &w.del); err != nil {
			return nil, fmt.Errorf("reading pg_stat_user_tables: %w", err)
		}
		writes[table] = w
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading pg_stat_user_tables: %w", err)
	}
	return writes, nil
}

// statementsSince is the number of statements run between the snapshots, or -1.
func (s benchStats) statementsSince(base benchStats) int64 {
	if s.calls < 0 || base.calls < 0 {
		return -1
	}
	return s.calls - base.calls
}

// heartbeatsSince is the number of heartbeat UPDATEs between the snapshots, or -1.
func (s benchStats) heartbeatsSince(base benchStats) int64 {
	if s.heartbeats < 0 || base.heartbeats < 0 {
		return -1
	}
	return s.heartbeats - base.heartbeats
}

// transactionsSince is the number of transactions between the snapshots, the monitor's left out.
func (s benchStats) transactionsSince(base benchStats) int64 {
	return s.transactions - base.transactions - (s.monitorTxs - base.monitorTxs)
}

// topStatements returns the n statements of this database with the most calls.
func (m *monitor) topStatements(ctx context.Context, n int) ([]statementCalls, error) {
	m.txs++
	rows, err := m.conn.Query(ctx, "SELECT calls, mean_exec_time, total_plan_time / greatest(calls, 1), regexp_replace(query, '\\s+', ' ', 'g') FROM "+
		m.stats+".pg_stat_statements WHERE dbid = $1 AND query NOT LIKE '%pg_stat%' ORDER BY calls DESC LIMIT $2", m.dbid, n)
	if err != nil {
		return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
	}
	var top []statementCalls
	for rows.Next() {
		var s statementCalls
		if err := rows.Scan(&s.calls, &s.meanMs, &s.planMs, &s.query); err != nil {
			rows.Close()
			return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
		}
		top = append(top, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading pg_stat_statements: %w", err)
	}
	return top, nil
}

// cloneFinished inserts count copies of the finished execution template: its row, node rows,
// value history and replaced attempts, with ids of their own, and their times age earlier. The
// rows are copied whole, whatever their columns, as the runtime wrote them. A copy's id is the
// template's, then -finished- and the characters that spell the template's lane, as an id's
// 11th and 12th from its last 20 do (persistence.LaneOf), then its number: it keeps its lane.
func (m *monitor) cloneFinished(ctx context.Context, schema, template string, count int, age time.Duration) error {
	if count <= 0 {
		return nil
	}
	s := pgx.Identifier{schema}.Sanitize()
	for _, t := range []struct{ table, key string }{
		{"executions", "id"}, {"nodes", "execution_id"}, {"value_history", "execution_id"}, {"attempts", "execution_id"},
	} {
		cols, err := m.copiedColumns(ctx, schema, t.table)
		if err != nil {
			return err
		}
		var names, values []string
		for _, c := range cols {
			name := pgx.Identifier{c.name}.Sanitize()
			names = append(names, name)
			switch {
			case c.name == t.key:
				values = append(values, "$2 || substr(t."+name+", length(t."+name+") - 9, 2) || lpad(g::text, 8, '0')")
			case c.typ == "timestamp with time zone":
				values = append(values, "t."+name+" - $4::bigint * interval '1 microsecond'")
			default:
				values = append(values, "t."+name)
			}
		}
		table := s + "." + pgx.Identifier{t.table}.Sanitize()
		sql := fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s t, generate_series(1, $3) g WHERE t.%s = $1",
			table, strings.Join(names, ", "), strings.Join(values, ", "), table, pgx.Identifier{t.key}.Sanitize())
		if err := m.exec(ctx, sql, template, template+"-finished-", count, age.Microseconds()); err != nil {
			return fmt.Errorf("inserting finished executions into %s: %w", t.table, err)
		}
	}
	// Vacuumed too, as old rows are: else autovacuum would visit a million new rows while the
	// replicas are measured, and the first reads would set their hint bits.
	if err := m.exec(ctx, fmt.Sprintf(`VACUUM (ANALYZE) %[1]s.executions, %[1]s.nodes, %[1]s.value_history, %[1]s.attempts`, s)); err != nil {
		return fmt.Errorf("vacuuming the tables: %w", err)
	}
	// And written out, so that the measured replicas do not share the disk with a checkpoint
	// spread over the next minutes. It takes a superuser, or pg_checkpoint: without, the
	// checkpoint is left to the server.
	_ = m.exec(ctx, "CHECKPOINT")
	return nil
}

// schemaSize returns the bytes that the tables of schema take, with their indexes and TOAST.
func (m *monitor) schemaSize(ctx context.Context, schema string) (int64, error) {
	var n int64
	err := m.queryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
		JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE ns.nspname = $1 AND c.relkind = 'r'`, []any{schema}, &n)
	if err != nil {
		return 0, fmt.Errorf("reading the size of schema %s: %w", schema, err)
	}
	return n, nil
}

// column is a column's name and data type.
type column struct{ name, typ string }

// copiedColumns lists the columns of a table that a copy of a row takes from the row: all but
// those a sequence fills.
func (m *monitor) copiedColumns(ctx context.Context, schema, table string) ([]column, error) {
	m.txs++
	rows, err := m.conn.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
		WHERE table_schema = $1 AND table_name = $2 AND is_generated = 'NEVER'
			AND coalesce(column_default, '') NOT LIKE 'nextval(%'
		ORDER BY ordinal_position`, schema, table)
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", table, err)
	}
	cols, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (column, error) {
		var c column
		err := row.Scan(&c.name, &c.typ)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", table, err)
	}
	return cols, nil
}

// finishedExecutions counts the executions among ids whose leaves are all set.
func (m *monitor) finishedExecutions(ctx context.Context, schema string, ids, leaves []string) (int64, error) {
	var n int64
	err := m.queryRow(ctx, `SELECT count(*) FROM (
			SELECT execution_id FROM `+pgx.Identifier{schema}.Sanitize()+`.nodes
			WHERE execution_id = ANY($1) AND node = ANY($2) AND value IS NOT NULL
			GROUP BY execution_id HAVING count(*) = $3) finished`,
		[]any{ids, leaves, len(leaves)}, &n)
	if err != nil {
		return 0, fmt.Errorf("counting the finished executions: %w", err)
	}
	return n, nil
}

// promotionStats is what bench reads of the gated node's promotions at the start and at the end
// of the measured time (-graph gated).
type promotionStats struct {
	pending  int64 // gated attempts PENDING
	admitted int64 // gated attempts that are not PENDING: promoted, or finished since
	// From pg_stat_statements, over the statements of this schema's promotion passes; passes is
	// -1 when it cannot be read.
	passes      int64   // calls of the pass's SELECT of candidates: one a pass
	passMs      float64 // the time of the pass's statements, executing and planning, summed
	chooseMaxMs float64 // the slowest SELECT of candidates, executing
}

// The statements of a gated promotion pass (persistence.promoteGated), as pg_stat_statements
// shows them, whitespace folded: the SELECT of candidates, the count of the limited nodes'
// attempts, and the UPDATE of those chosen. They run after the pass has taken the promotion lock,
// so their time is the time a pass holds it for its own work. When the promotion's SQL changes,
// these must follow (TestBenchGated fails until they do).
const (
	promoteChooseSQL = `WITH RECURSIVE oldest AS ( (SELECT c.attempt_id AS id, c.lane, c.execution_id, c.concurrency_key, %`
	promoteCountSQL  = `SELECT graph_key, node, count(*) AS n FROM % WHERE state IN (%) AND max_parallel IS NOT NULL GROUP BY graph_key, node`
	promoteUpdateSQL = `UPDATE %.nodes c SET state = $%, available_at = $%, rev = l.rev FROM (SELECT n.lane, n.execution_id, n.node, n.state, %`
)

// promotions reads the gated attempts of the schema and, when pg_stat_statements can be read,
// the statements of its promotion passes since the last reset.
func (m *monitor) promotions(ctx context.Context, schema string) (promotionStats, error) {
	s := promotionStats{passes: -1}
	quoted := pgx.Identifier{schema}.Sanitize()
	err := m.queryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'PENDING'), count(*) FILTER (WHERE state <> 'PENDING')
		FROM `+quoted+`.computations WHERE concurrency_key IS NOT NULL OR max_parallel IS NOT NULL`, nil, &s.pending, &s.admitted)
	if err != nil {
		return s, fmt.Errorf("counting the gated computations: %w", err)
	}
	if m.stats == "" {
		return s, nil
	}
	var updates int64
	err = m.queryRow(ctx, `SELECT coalesce(sum(calls) FILTER (WHERE q LIKE $3), 0)::bigint,
			coalesce(sum(total_exec_time + total_plan_time), 0)::float8,
			coalesce(max(max_exec_time) FILTER (WHERE q LIKE $3), 0)::float8,
			coalesce(sum(calls) FILTER (WHERE q LIKE $5), 0)::bigint
		FROM (SELECT calls, total_exec_time, total_plan_time, max_exec_time, regexp_replace(query, '\s+', ' ', 'g') AS q FROM `+m.stats+`.pg_stat_statements WHERE dbid = $1) s
		WHERE strpos(q, $2) > 0 AND (q LIKE $3 OR q LIKE $4 OR q LIKE $5)`,
		[]any{m.dbid, quoted + ".nodes", promoteChooseSQL, promoteCountSQL, promoteUpdateSQL},
		&s.passes, &s.passMs, &s.chooseMaxMs, &updates)
	if err != nil {
		return s, fmt.Errorf("reading the promotion statements from pg_stat_statements: %w", err)
	}
	if s.passes > 0 && updates == 0 {
		// Passes chose attempts, and no UPDATE of them matched: promoteUpdateSQL no longer
		// follows the promotion's SQL, and the pass time would leave it out.
		s.passes = -1
	}
	return s, nil
}
