package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// finalLine is the shape of journey bench's last line: the keys in this order, numbers or n/a,
// and those of -graph gated after them.
var finalLine = regexp.MustCompile(`^bench: mode=\S+ graph=\S+ computations/s=\S+ p50_ms=\S+ p99_ms=\S+ ` +
	`statements_per_computation=\S+ transactions_per_computation=\S+ row_writes_per_execution=\S+ go_cpu_us_per_computation=\S+ allocs_per_computation=\S+ ` +
	`pg_cpu_us_per_computation=\S+ us_per_computation_start=\S+ us_per_computation_end=\S+ replicas=\d+ workers=\d+ executions=\d+ ` +
	`computations=\d+ elapsed_s=\S+ backlog_start=-?\d+ backlog_end=-?\d+ failed=\d+ unfinished=\d+ heartbeat_statements_per_interval=\S+ keyed=(true|false)` +
	`( keys=\d+ max_parallel=\d+ promotions_per_s=\S+ promote_passes=\S+ promote_pass_ms=\S+ promote_choose_ms_max=\S+ ` +
	`pending_start=\d+ pending_end=\d+ max_running=\d+)?$`)

// runBenchLine runs journey bench and returns the fields of its final line, after checking the
// line's shape.
func runBenchLine(t *testing.T, args ...string) (map[string]string, string) {
	t.Helper()
	code, stdout, stderr := runJourney(t, append([]string{"bench"}, args...)...)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	last := lines[len(lines)-1]
	require.Regexp(t, finalLine, last)
	fields := map[string]string{}
	for _, kv := range strings.Fields(strings.TrimPrefix(last, "bench: ")) {
		k, v, _ := strings.Cut(kv, "=")
		fields[k] = v
	}
	return fields, stdout
}

func number(t *testing.T, fields map[string]string, key string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(fields[key], 64)
	require.NoError(t, err, "%s=%s is not a number", key, fields[key])
	return f
}

func TestBenchModes(t *testing.T) {
	t.Setenv("DATABASE_URL", pgtest.URL(t))
	for _, tc := range []struct {
		name         string
		args         []string
		mode, shape  string
		executions   int // exactly this many, or at least 1 when 0
		perExecution int
	}{
		{"drain", []string{"-n", "50"}, "drain", "one", 50, 1},
		{"drain chain5 on two replicas among finished rows", []string{"-n", "20", "-graph", "chain5", "-replicas", "2",
			"-finished-rows", "100"}, "drain", "chain5", 20, 5},
		{"continuous", []string{"-duration", "2s", "-producers", "4", "-backlog", "200"}, "continuous", "one", 0, 1},
		{"open loop", []string{"-rate", "20", "-duration", "2s", "-graph", "fanout10"}, "rate", "fanout10", 40, 10},
		{"open loop keyed", []string{"-rate", "20", "-duration", "2s", "-keyed"}, "rate", "one", 40, 1},
		{"open loop started in transactions", []string{"-rate", "20", "-duration", "2s", "-start", "tx"}, "rate", "one", 40, 1},
		{"open loop started with values", []string{"-rate", "20", "-duration", "2s", "-start", "values"}, "rate", "one", 40, 1},
		{"drain keyed", []string{"-n", "30", "-keyed"}, "drain", "one", 30, 1},
		{"drain rate-limited beside rate-limited work that waits", []string{"-n", "30", "-graph", "ratelimited", "-keys", "3",
			"-rate-limit", "100", "-rated", "50"}, "drain", "ratelimited", 30, 1},
		{"continuous gated", []string{"-duration", "2s", "-graph", "gated", "-keys", "5", "-max-parallel", "2", "-backlog", "50"},
			"continuous", "gated", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fields, stdout := runBenchLine(t, append(tc.args, "-schema", pgtest.Schema(t))...)
			require.Equal(t, tc.mode, fields["mode"])
			require.Equal(t, tc.shape, fields["graph"])
			require.Equal(t, strconv.FormatBool(slices.Contains(tc.args, "-keyed")), fields["keyed"])
			if tc.mode == "continuous" {
				// Counted in the window only: on a busy machine, the replica may finish none in 2s.
				require.GreaterOrEqual(t, number(t, fields, "computations/s"), 0.0)
				require.LessOrEqual(t, number(t, fields, "backlog_end"), 200+100*4.0,
					"the producers stop at the backlog, give or take a StartMany each")
			} else {
				require.Positive(t, number(t, fields, "computations/s"))
			}
			executions := number(t, fields, "executions")
			if tc.executions > 0 {
				require.EqualValues(t, tc.executions, executions)
			} else {
				require.Positive(t, executions)
			}
			require.Equal(t, executions*float64(tc.perExecution), number(t, fields, "computations"),
				"every computation of every execution started was saved")
			require.Equal(t, "0", fields["failed"])
			require.Equal(t, "0", fields["unfinished"], "every execution started has finished, by the database")
			// The process worked, and allocated, to finish them.
			require.Positive(t, number(t, fields, "go_cpu_us_per_computation"))
			require.Positive(t, number(t, fields, "allocs_per_computation"))
			// The tests' server runs here, but other tests share it: its CPU is a figure or n/a.
			require.Regexp(t, `^(n/a|\d+\.\d)$`, fields["pg_cpu_us_per_computation"])
			if tc.mode == "drain" {
				require.Positive(t, number(t, fields, "us_per_computation_start"))
				// A small drain's last tenth may finish with the one before it.
				require.GreaterOrEqual(t, number(t, fields, "us_per_computation_end"), 0.0)
				require.Equal(t, executions*float64(tc.perExecution), number(t, fields, "backlog_start"))
				require.Equal(t, "0", fields["backlog_end"])
			}
			if tc.mode == "rate" {
				p50, p99 := number(t, fields, "p50_ms"), number(t, fields, "p99_ms")
				require.Positive(t, p50)
				require.GreaterOrEqual(t, p99, p50)
			} else {
				require.Equal(t, "n/a", fields["p50_ms"])
				require.Equal(t, "n/a", fields["p99_ms"])
			}
			// Other tests' sessions share the test database: their work would be counted.
			if fields["transactions_per_computation"] != "n/a" {
				require.Positive(t, number(t, fields, "transactions_per_computation"))
			}
			// Each execution writes at least its row and its input's node row, and each computation
			// its node row when it is made ready and when it completes.
			require.GreaterOrEqual(t, number(t, fields, "row_writes_per_execution"), 2+2*float64(tc.perExecution))
			if tc.shape == "gated" {
				// Its backlog was made ready before D: it waited from the start, gated.
				require.Equal(t, "50", fields["backlog_start"])
				require.GreaterOrEqual(t, number(t, fields, "pending_start"), 48.0, "at most 2 promoted, by MaxParallel(2)")
			}
			if strings.Contains(tc.name, "finished rows") {
				require.Regexp(t, `bench: inserted 100 finished executions in \S+; the schema takes \d+ MB on disk`, stdout)
			}
		})
	}
}

// With -pooler, the replicas work through -pgbouncer's PgBouncer: Debian's, by default, with
// PgBouncer's defaults; and from PgBouncer 1.21 on, with max_prepared_statements, the replicas
// preparing their statements by name.
func TestBenchBehindAPooler(t *testing.T) {
	t.Setenv("DATABASE_URL", pgtest.URL(t))
	t.Setenv("JOURNEY_PGBOUNCER", "") // -pgbouncer's default: Debian's
	for _, tc := range []struct {
		name    string
		program func(testing.TB) string // -pgbouncer; "" for its default
		says    string
	}{
		{"debian", func(t testing.TB) string {
			t.Helper()
			if os.Getenv("JOURNEY_SKIP_POOLER") == "1" {
				t.Skip("JOURNEY_SKIP_POOLER=1")
			}
			return ""
		}, `(?m)^bench: through PgBouncer \S+ without max_prepared_statements, the replicas' default_query_exec_mode=cache_describe, and connect_query = 'SET enable_bitmapscan = off; .*'$`},
		{"modern", pgtest.ModernBouncerProgram,
			`(?m)^bench: through PgBouncer \S+ with max_prepared_statements = 200, the replicas' default_query_exec_mode=cache_statement, and connect_query = 'SET enable_bitmapscan = off; .*'$`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"-n", "30", "-pooler", "-schema", pgtest.Schema(t)}
			if program := tc.program(t); program != "" {
				args = append(args, "-pgbouncer", program)
			}
			fields, stdout := runBenchLine(t, args...)
			require.Regexp(t, tc.says, stdout)
			require.Equal(t, "30", fields["executions"])
			require.Equal(t, "0", fields["failed"])
			require.Equal(t, "0", fields["unfinished"])
		})
	}
}

func TestBenchCountsStatementsOnItsOwnCluster(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	fields, stdout := runBenchLine(t, "-n", "50", "-top-statements", "3")
	require.Equal(t, "50", fields["executions"])
	// The counts come from pg_stat_statements and pg_stat_database; batches share them among
	// their computations, so a computation's share is a fraction, but never nothing.
	require.Positive(t, number(t, fields, "statements_per_computation"))
	require.Positive(t, number(t, fields, "transactions_per_computation"))
	require.Equal(t, 3, strings.Count(stdout, "\nbench:   "), "three statements listed:\n%s", stdout)
	// Each execution of x → y inserts its row and two node rows, which its claim and completion
	// update; it replaces no value, and no attempt but the one that the setup replica releases at
	// its Stop, which moves to the attempts' history (1 of 50).
	require.Regexp(t, `bench: row writes per execution: (attempts 0\.0[0-2] inserted, 0\.00 updated \(0\.00 HOT\), 0\.00 deleted; )?executions 1\.00 inserted, 0\.00 updated`, stdout)
	require.Regexp(t, `; nodes 2\.00 inserted, \d+\.\d\d updated \(\d+\.\d\d HOT\)`, stdout)
	require.NotRegexp(t, `; (attempts|value_history) `, stdout)
}

// With every computation running at once for a while, the replica's heartbeats cost about one
// statement per heartbeat interval, however many run.
func TestBenchCountsHeartbeatStatements(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	fields, _ := runBenchLine(t, "-n", "200", "-workers", "200", "-hold", "1s", "-heartbeat", "100ms")
	require.Equal(t, "0", fields["unfinished"])
	perInterval := number(t, fields, "heartbeat_statements_per_interval")
	require.Positive(t, perInterval, "the computations ran for 10 intervals: their heartbeats were extended")
	require.LessOrEqual(t, perInterval, 1.5)
}

// The gated graph's node runs at most MaxParallel at once, and bench reports its promotions:
// each of the executions made ready, but the one the setup replica promoted, promoted once in
// the measured time, one a pass, by passes whose statements pg_stat_statements timed.
func TestBenchGated(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	fields, _ := runBenchLine(t, "-graph", "gated", "-keys", "2", "-max-parallel", "1", "-n", "20", "-hold", "20ms")
	require.Equal(t, "20", fields["executions"])
	require.Equal(t, "20", fields["computations"])
	require.Equal(t, "0", fields["unfinished"])
	require.Equal(t, "2", fields["keys"])
	require.Equal(t, "1", fields["max_parallel"])
	require.Equal(t, "1", fields["max_running"], "MaxParallel(1): one computation at a time, each held 20ms")

	pendingStart := number(t, fields, "pending_start")
	require.GreaterOrEqual(t, pendingStart, 19.0, "the setup replica promotes at most one")
	require.LessOrEqual(t, pendingStart, 20.0)
	require.Equal(t, "0", fields["pending_end"])
	// promotions_per_s × elapsed_s, rounded as printed: the executions left PENDING at the start.
	promoted := number(t, fields, "promotions_per_s") * number(t, fields, "elapsed_s")
	require.InDelta(t, pendingStart, promoted, 1, "promotions_per_s=%s elapsed_s=%s", fields["promotions_per_s"], fields["elapsed_s"])
	require.GreaterOrEqual(t, number(t, fields, "promote_passes"), pendingStart, "MaxParallel(1): a pass promotes one at most")
	require.Positive(t, number(t, fields, "promote_pass_ms"))
	require.Less(t, number(t, fields, "promote_pass_ms"), 1000.0)
	require.Positive(t, number(t, fields, "promote_choose_ms_max"))
}

func TestBenchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "give -n N"},
		{[]string{"-n", "0"}, "-n is 0"},
		{[]string{"-n", "5", "-heartbeat", "0s"}, "-heartbeat is 0s"},
		{[]string{"-n", "5", "-duration", "1s"}, "-n (drain) cannot be combined"},
		{[]string{"-rate", "10"}, "-rate needs -duration"},
		{[]string{"-n", "5", "-start", "tx"}, "-start applies to the open loop (-rate) only"},
		{[]string{"-rate", "10", "-duration", "1s", "-start", "later"}, `-start "later" is not one of set, values, tx`},
		{[]string{"-rate", "-1", "-duration", "1s"}, "-rate is -1"},
		{[]string{"-duration", "0s"}, "-duration is 0s"},
		{[]string{"-n", "5", "-graph", "star"}, `-graph "star"`},
		{[]string{"-n", "5", "-keys", "3"}, "-keys applies to -graph gated and ratelimited only"},
		{[]string{"-n", "5", "-graph", "chain5", "-max-parallel", "3"}, "-max-parallel applies to -graph gated only"},
		{[]string{"-n", "5", "-graph", "ratelimited", "-max-parallel", "3"}, "-max-parallel applies to -graph gated only"},
		{[]string{"-n", "5", "-rate-limit", "3"}, "-rate-limit and -rate-per apply to -graph ratelimited only"},
		{[]string{"-n", "5", "-graph", "ratelimited", "-rate-limit", "0"}, "-rate-limit is 0"},
		{[]string{"-n", "5", "-graph", "ratelimited", "-rate-per", "0s"}, "-rate-per is 0s"},
		{[]string{"-n", "5", "-rated", "-1"}, "-rated is -1"},
		{[]string{"-n", "5", "-graph", "gated", "-keys", "0"}, "-graph gated needs -keys or -max-parallel"},
		{[]string{"-n", "5", "-graph", "gated", "-keys", "-1"}, "-keys is -1"},
		{[]string{"-n", "5", "-graph", "gated", "-max-parallel", "-2"}, "-max-parallel is -2"},
		{[]string{"-n", "5", "-replicas", "0"}, "-replicas is 0"},
		{[]string{"-n", "5", "-workers", "0"}, "-workers is 0"},
		{[]string{"-n", "5", "-finished-rows", "-1"}, "-finished-rows is -1"},
		{[]string{"-n", "5", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"-n", "5", "-pgbouncer", "/usr/sbin/pgbouncer"}, "-pgbouncer applies to -pooler only"},
		{[]string{"-bogus"}, "-bogus"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runJourney(t, append([]string{"bench"}, tc.args...)...)
			require.Equal(t, 2, code)
			require.Contains(t, stderr, tc.want)
			require.Empty(t, stdout, "nothing ran")
		})
	}
}

// The continuous mode has one producer, as river bench has one inserter, unless -producers says
// otherwise; the drain's set-up has 16.
func TestBenchProducers(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"-duration", "1s"}, 1},
		{[]string{"-duration", "1s", "-producers", "4"}, 4},
		{[]string{"-n", "5"}, 16},
	} {
		cfg, _, ok := parseBenchFlags(&environment{stdout: new(bytes.Buffer), stderr: new(bytes.Buffer), getenv: os.Getenv}, tc.args)
		require.True(t, ok, tc.args)
		require.Equal(t, tc.want, cfg.producers, tc.args)
	}
}

// The open loop's replicas open all their pool's connections when they start, unless the
// connection string says how many.
func TestWarmPool(t *testing.T) {
	for _, tc := range []struct{ conn, want string }{
		{"postgres://u@h/db?sslmode=disable", "postgres://u@h/db?pool_min_conns=20&sslmode=disable"},
		{"postgres://u@h/db?pool_max_conns=5", "postgres://u@h/db?pool_max_conns=5&pool_min_conns=5"},
		{"postgres://u@h/db?pool_min_conns=2", "postgres://u@h/db?pool_min_conns=2"},
		{"host=h user=u pool_max_conns=7", "host=h user=u pool_max_conns=7 pool_min_conns=7"},
	} {
		require.Equal(t, tc.want, warmPool(tc.conn), tc.conn)
	}
}

func TestBenchRefusesAnExistingSchema(t *testing.T) {
	schema := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", pgtest.URL(t))
	conn, err := pgx.Connect(t.Context(), pgtest.URL(t))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(t.Context(), "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".mine (x int)")
	require.NoError(t, err)

	code, _, stderr := runJourney(t, "bench", "-n", "5", "-schema", schema)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, fmt.Sprintf("schema %q exists", schema))
	var n int
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*) FROM "+schema+".mine").Scan(&n),
		"bench leaves a schema it did not create alone")
}

// TestCloneFinished checks the copies of a finished execution: the same rows in every table,
// under ids of their own.
func TestCloneFinished(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	schema := pgtest.Schema(t)
	g := graph.MustNew("clone", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.Int("x") + 1, nil
		}),
	})
	rt, err := journey.New(ctx, journey.Config{DatabaseURL: pgtest.URL(t), Schema: schema, Graphs: []*graph.Graph{g}})
	require.NoError(t, err)
	defer func() { require.NoError(t, rt.Stop(context.Background())) }()
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	for x := range 2 { // x and y replaced once: history
		rev, err := rt.Set(ctx, ex.ID, "x", x)
		require.NoError(t, err)
		_, err = rt.Get(ctx, ex.ID, "y", journey.WaitNewerThan(rev))
		require.NoError(t, err)
	}

	m, err := connectMonitor(ctx, pgtest.URL(t))
	require.NoError(t, err)
	defer m.close()
	require.NoError(t, m.cloneFinished(ctx, schema, ex.ID, 10, 30*24*time.Hour))

	count := func(sql string) int {
		var n int
		require.NoError(t, m.conn.QueryRow(ctx, strings.ReplaceAll(sql, "{s}", schema)).Scan(&n))
		return n
	}
	for table, key := range map[string]string{"executions": "id", "nodes": "execution_id",
		"value_history": "execution_id", "attempts": "execution_id"} {
		template := count(fmt.Sprintf(`SELECT count(*) FROM {s}.%s WHERE %s = '%s'`, table, key, ex.ID))
		require.Positive(t, template, table)
		require.Equal(t, 11*template, count(fmt.Sprintf(`SELECT count(*) FROM {s}.%s WHERE %s LIKE '%s%%'`, table, key, ex.ID)),
			"%s: the template's rows and ten copies", table)
	}
	require.Equal(t, 10, count(`SELECT count(DISTINCT execution_id) FROM {s}.computations
		WHERE state = 'SUCCESS' AND execution_id LIKE '%-finished-%'`), "each copy has its finished computation")
	require.Equal(t, 10, count(fmt.Sprintf(`SELECT count(*) FROM {s}.executions c, {s}.executions t
		WHERE t.id = '%[1]s' AND c.id LIKE '%[1]s-finished-%%' AND c.created_at = t.created_at - interval '30 days'
			AND c.updated_at = t.updated_at - interval '30 days'`, ex.ID)), "the copies are 30 days older")
	finished, err := m.finishedExecutions(ctx, schema, []string{ex.ID, ex.ID + "-finished-" + ex.ID[len(ex.ID)-10:len(ex.ID)-8] + "00000007"}, []string{"y"})
	require.NoError(t, err)
	require.EqualValues(t, 2, finished)
}

// A session that ends while the bench counts the other sessions of its database is waited for,
// not counted: the throwaway cluster's readiness checks, still ending on a busy machine, made
// the statement counts n/a.
func TestSnapshotWaitsForEndingSessions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	name := pgx.Identifier{strings.ToLower(strings.ReplaceAll(pgtest.Schema(t), "jt_", "jd_"))}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name.Sanitize()+" WITH (FORCE)")
		_ = admin.Close(context.Background())
	})
	cfg := admin.Config().Copy()
	cfg.Database = name[0]
	url := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, cfg.Database)

	m, err := connectMonitor(ctx, url)
	require.NoError(t, err)
	defer m.close()
	other, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	ended := false
	m.counted = func(n int) {
		if n > 0 && !ended {
			ended = true
			require.NoError(t, other.Close(ctx))
		}
	}
	s, err := m.snapshot(ctx, false)
	require.NoError(t, err)
	require.True(t, ended, "the snapshot did not see the other session")
	require.Zero(t, s.others, "sessions counted as other users of the database")
}

// The CPU of a process tree counts what its children used, once they have ended: a child that
// burns CPU raises it by at least the child's own CPU.
func TestProcessTreeCPUCountsEndedChildren(t *testing.T) {
	before := processTreeCPU(os.Getpid())
	require.GreaterOrEqual(t, before, time.Duration(0), "/proc tells this process's CPU")
	cmd := exec.CommandContext(t.Context(), "sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	require.NoError(t, cmd.Run())
	child := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	require.Greater(t, child, 50*time.Millisecond, "the child burned CPU")
	after := processTreeCPU(os.Getpid())
	require.GreaterOrEqual(t, after-before, child-2*time.Second/clockTicks, "the ended child's CPU is counted")
}
