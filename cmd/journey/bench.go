package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/devpg"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/persistence"
)

const benchDescription = `bench measures the throughput and latency of journey-go on PostgreSQL, in the manner of
river bench. It works in a schema of its own, which it creates and drops, with replicas in
this process. It has three modes:

  -n N                  drain: N executions are made ready (their input set) while no
                        replica works, then the replicas start, and bench times how long
                        they take to finish every computation
  -duration D           continuous: while the replicas work, for D, one producer keeps the
                        backlog topped up, as river bench's one inserter does: whenever fewer
                        than -backlog computations are left, it starts executions (StartMany
                        of 100) until there are that many, and looks again 250ms later;
                        bench reports the computations completed per second and the backlog
                        at the start and the end of D
  -rate R -duration D   open loop: R executions a second for D, each Start, then Set of the
                        input and Get(WaitAny) of the graph's last nodes; bench reports the
                        latency from Set to Get's return, of a warm replica: it opens its
                        pool's connections when it starts (pool_min_conns, unless
                        $DATABASE_URL sets it), and the executions started in the first
                        second (at most half of D) are left out

After D, bench waits for the work left and checks from the database that every execution it
started has finished. It prints a line every 2s, and then a final line:

  bench: mode=drain graph=one computations/s=… p50_ms=… p99_ms=… statements_per_computation=… …

statements_per_computation and transactions_per_computation count everything the replicas
and producers sent, from pg_stat_statements (when shared_preload_libraries loads it; else
n/a) and pg_stat_database, over the run, per computation finished. They are n/a when other
sessions use the database, since their work would be counted: give bench a database of its
own. row_writes_per_execution is the rows inserted, updated and deleted in bench's schema
(pg_stat_user_tables), from the first Start to the end, per execution started; a line before
the final one gives them by table, with the updates that were HOT (wrote no index entry).
go_cpu_us_per_computation and allocs_per_computation are bench's own process (the replicas and
the producers, not PostgreSQL): its CPU, user and system, and the heap objects it allocated,
over the measured time, per computation finished in it. pg_cpu_us_per_computation is the
PostgreSQL server's CPU, user and system, over the same time: its postmaster's, its processes',
and what its processes that ended used, read from /proc when the server runs on this machine
(its data_directory holds a postmaster.pid that names a live process here); else n/a. In a
drain, us_per_computation_start and us_per_computation_end are the wall time per computation of
the first and the last tenth of the computations: a cost that grows with the backlog shows as a
start slower than the end.
heartbeat_statements_per_interval is the number of heartbeat UPDATEs of a replica per
heartbeat interval (-heartbeat), over the measured time: with -hold, which keeps up to -workers
computations running at once on each replica, it shows what their heartbeats cost, e.g.

  journey bench -n 10000 -workers 10000 -hold 20s -heartbeat 1s

-graph gated runs x → gated, a node with a concurrency key, x mod -keys, and MaxParallel
(-max-parallel) if given; x is 1, 2, 3… With -duration, its backlog is made ready before D,
and kept. Its final line adds, over the measured time (in continuous, D without the tail):
promotions_per_s, the gated attempts that left PENDING a second; promote_passes and
promote_pass_ms, the promotion passes and their mean time, executing and planning their
statements after the promotion lock (from pg_stat_statements; n/a without it);
promote_choose_ms_max, the slowest SELECT of candidates; pending_start and pending_end, the gated
attempts PENDING; and max_running, the most computations running at once, e.g.

  journey bench -graph gated -keys 10 -max-parallel 5 -duration 20s -backlog 10000

-graph ratelimited runs x → rated, a node with RateLimit(-rate-limit, -rate-per), per key x mod
-keys (RateKey), or one window with -keys 0. -rated N first starts N executions of another graph
that the replicas serve, bench_rated, whose node allows 1 start a day per key (x mod 10): 10 of
them run, and the rest wait PENDING beside the measured graph's, for every promotion to look at.
A run with it beside one without shows what waiting rate-limited work costs other work, e.g.

  journey bench -n 20000 -rated 10000

-keyed starts each execution with a key of its own (journey.WithKey in the open loop, WithKeys
for StartMany): a run with it beside one without shows what a keyed Start costs, e.g.

  journey bench -rate 1000 -duration 20s -keyed

-pooler puts a PgBouncer in transaction mode between the replicas and the database, with the
direct connection for LISTEN (Config.ListenURL): a run with it beside one without, in one sitting,
shows what the pooler costs. The program is -pgbouncer (default $JOURNEY_PGBOUNCER, else Debian's
pgbouncer), with PgBouncer's defaults but for a connect_query that gives each server connection
the plan settings that the runtime gives its direct connections. From PgBouncer 1.21 on, bench
sets max_prepared_statements = 200, and the replicas' DatabaseURL asks for pgx's prepared
statements (default_query_exec_mode=cache_statement), as docs/operating.md recommends, e.g.

  journey bench -rate 1000 -duration 20s -pooler -pgbouncer .tools/pgbouncer/bin/pgbouncer

bench uses $DATABASE_URL. Without it, it starts a throwaway PostgreSQL with pg_stat_statements
loaded and PostgreSQL's durable defaults (fsync, synchronous_commit and full_page_writes on;
-durable=false turns them off), and deletes it afterwards. It exits 1 if a computation failed or an execution did not
finish.`

// Defaults and limits of journey bench.
const (
	benchProgressEvery = 2 * time.Second
	// benchWarmup is the start of an open loop whose latencies are not counted (at most half of
	// it): the replica's pool may still be opening its connections (see warmPool).
	benchWarmup = time.Second
	// benchStallTimeout ends a wait for computations when none has finished for this long.
	benchStallTimeout = 2 * time.Minute
	// benchStopTimeout bounds the graceful stop of each replica at the end.
	benchStopTimeout = 30 * time.Second
	// benchAppName is the application_name of the replicas' connections, by which bench tells
	// them from other sessions in pg_stat_activity.
	benchAppName = "journey-bench"
)

// benchShapes are the graphs bench can run: an input x and compute nodes, each of which adds 1
// to the value of the one node it needs.
var benchShapes = map[string][]benchNode{
	"one":      {{"y", "x"}},
	"chain5":   {{"c1", "x"}, {"c2", "c1"}, {"c3", "c2"}, {"c4", "c3"}, {"c5", "c4"}},
	"fanout10": fanout(10),
	"gated":    {{"gated", "x"}}, // with a concurrency key (-keys) and MaxParallel (-max-parallel)
	// with RateLimit(-rate-limit, -rate-per), per key (-keys)
	"ratelimited": {{"rated", "x"}},
	"map1000":     nil, // one execution whose Map starts -n children (see benchMap)
}

// benchNode is a compute node of a bench graph and the node it needs.
type benchNode struct{ name, needs string }

func fanout(n int) []benchNode {
	nodes := make([]benchNode, n)
	for i := range nodes {
		nodes[i] = benchNode{"f" + strconv.Itoa(i+1), "x"}
	}
	return nodes
}

// benchConfig is what the flags of journey bench ask for.
type benchConfig struct {
	mode          string // "drain", "continuous" or "rate"
	n             int
	duration      time.Duration
	rate          float64
	shape         string
	start         string // the open loop's: "set", "values" or "tx"
	fromCommit    bool   // -start tx: time from the COMMIT, not from the BEGIN
	replicas      int
	workers       int
	producers     int
	backlog       int
	paused        int
	rated         int           // -rated: the executions of bench_rated started first, whose work waits
	rateLimit     int           // -graph ratelimited: RateLimit's n
	ratePer       time.Duration // -graph ratelimited: RateLimit's per
	finishedRows  int
	finishedAge   time.Duration
	prunable      bool   // -finished-age given: the finished rows have what retention deletes
	schema        string // empty: a fresh journey_bench_<random>
	topStatements int
	cpuProfile    string
	memProfile    string        // -memprofile
	hold          time.Duration // how long each measured computation blocks before it returns
	heartbeat     time.Duration // the compute nodes' heartbeat interval; 0: the graph's default
	keys          int           // -graph gated: the concurrency keys, x mod keys (ratelimited: rate keys); 0: no key
	maxParallel   int           // -graph gated: the node's MaxParallel; 0: no limit
	durable       bool          // the throwaway PostgreSQL keeps PostgreSQL's durable defaults
	pooler        bool          // the replicas go through a PgBouncer in transaction mode
	pgbouncer     string        // -pooler's program; "" for devpg's default, Debian's
	keyed         bool          // each execution started gets a key of its own
	priorities    int           // the executions started in a drain get priorities 0 to this, in turn
}

// heartbeatInterval is the compute nodes' heartbeat interval.
func (c benchConfig) heartbeatInterval() time.Duration {
	if c.heartbeat > 0 {
		return c.heartbeat
	}
	return graph.DefaultHeartbeatInterval
}

// runBench implements "journey bench".
func runBench(ctx context.Context, env *environment, args []string) int {
	cfg, code, ok := parseBenchFlags(env, args)
	if !ok {
		return code
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	dbURL := os.Getenv("DATABASE_URL")
	if dbURL == "" {
		cluster, err := startBenchCluster(ctx, env.logger, cfg.durable)
		if err != nil {
			fmt.Fprintf(env.stderr, "journey bench: %v\n", err)
			return 1
		}
		defer func() {
			if err := cluster.Stop(); err != nil {
				env.logger.Error("stopping PostgreSQL", "error", err)
			}
		}()
		dbURL = cluster.URL()
	}

	if cfg.shape == "map1000" {
		if err := benchMap(ctx, env, cfg, dbURL); err != nil {
			fmt.Fprintf(env.stderr, "journey bench: %v\n", err)
			return 1
		}
		return 0
	}
	b := &benchmark{cfg: cfg, env: env, url: dbURL, nodes: benchShapes[cfg.shape],
		logger: slog.New(slog.NewTextHandler(env.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), progressed: make(chan struct{}, 1)}
	res, err := b.run(ctx)
	if err != nil {
		fmt.Fprintf(env.stderr, "journey bench: %v\n", err)
		return 1
	}
	fmt.Fprintln(env.stdout, res.line(cfg))
	if res.failed > 0 || res.unfinished > 0 {
		fmt.Fprintf(env.stderr, "journey bench: %d computation(s) failed and %d execution(s) did not finish\n",
			res.failed, res.unfinished)
		return 1
	}
	return 0
}

// parseBenchFlags parses the flags of journey bench. When it returns false, the command should
// exit with the code.
func parseBenchFlags(env *environment, args []string) (benchConfig, int, bool) {
	fs := newFlagSet(env, "bench", "-n N | -duration D | -rate R -duration D [flags]", benchDescription)
	var cfg benchConfig
	fs.IntVar(&cfg.n, "n", 0, "drain: make `N` executions ready, then time the replicas finishing them")
	fs.DurationVar(&cfg.duration, "duration", 0, "continuous, or open loop with -rate: run for this `duration`")
	fs.Float64Var(&cfg.rate, "rate", 0, "open loop: start this many `executions` a second (with -duration)")
	fs.StringVar(&cfg.shape, "graph", "one", "the graph: one (x → y), chain5 (x → c1 → … → c5), fanout10 (x → f1…f10) "+
		"gated (x → gated, with -keys and -max-parallel), ratelimited (x → rated, with -rate-limit, -rate-per and -keys) "+
		"or map1000 (one execution whose graph.Map starts -n children of x → y, and collects them)")
	fs.IntVar(&cfg.keys, "keys", 10, "-graph gated: the number of concurrency keys, x mod `K`; 0: no concurrency key; "+
		"-graph ratelimited: the number of rate keys; 0: one window")
	fs.IntVar(&cfg.rateLimit, "rate-limit", 1000, "-graph ratelimited: the `N` of the node's RateLimit(N, per)")
	fs.DurationVar(&cfg.ratePer, "rate-per", time.Second, "-graph ratelimited: the `window` of the node's RateLimit")
	fs.IntVar(&cfg.rated, "rated", 0, "first start this many executions of another graph that the replicas serve, "+
		"bench_rated, whose node allows 1 start a day per key (x mod 10): all but 10 wait PENDING beside the measured graph's")
	fs.IntVar(&cfg.maxParallel, "max-parallel", 0, "-graph gated: the node's MaxParallel(`P`); 0: no limit")
	fs.IntVar(&cfg.replicas, "replicas", 1, "the `number` of replicas (runtimes) in this process")
	fs.IntVar(&cfg.workers, "workers", riverBenchWorkers, "MaxWorkers of each replica: river bench's number unless set "+
		"(the runtime's default is "+strconv.Itoa(journey.DefaultMaxWorkers)+")")
	fs.IntVar(&cfg.producers, "producers", 16, "the goroutines that start executions, for -n; for -duration, 1 unless set")
	fs.IntVar(&cfg.backlog, "backlog", 10000, "continuous: the `computations` the producers keep waiting to run")
	fs.IntVar(&cfg.finishedRows, "finished-rows", 0, "first insert this many finished executions, with their values and computations")
	fs.IntVar(&cfg.paused, "paused", 0, "first start this many executions of another graph that the replicas serve, "+
		"bench_paused, whose version is paused (PauseGraph): their work waits beside the measured graph's")
	fs.DurationVar(&cfg.finishedAge, "finished-age", 0, "give the -finished-rows what retention deletes (the input set twice: an "+
		"attempt superseded, values replaced), dated this much earlier: past the replicas' Retention (7 days), their "+
		"sweepers delete it while they are measured; 0 to compare")
	fs.StringVar(&cfg.schema, "schema", "", "the `schema` to create, work in and drop; it must not exist (default journey_bench_<random>)")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured time (this process: the replicas and producers, as go_cpu_us_per_computation) to `file`")
	fs.StringVar(&cfg.memProfile, "memprofile", "", "write the allocations of this process to `file` at the end of the measured time, and to file.start at its start, as heap profiles: go tool pprof -base file.start file shows the measured time's")
	fs.IntVar(&cfg.topStatements, "top-statements", 0, "print the `N` statements with the most calls per computation, from pg_stat_statements")
	fs.DurationVar(&cfg.hold, "hold", 0, "make each computation block for this `duration` (or until it is canceled) before it returns, "+
		"so that up to -workers run at once on each replica")
	fs.BoolVar(&cfg.durable, "durable", true, "the throwaway PostgreSQL flushes its WAL as PostgreSQL does by default (fsync, "+
		"synchronous_commit and full_page_writes on); -durable=false turns them off, as for the tests")
	fs.BoolVar(&cfg.pooler, "pooler", false, "the replicas connect through a PgBouncer in transaction mode (-pgbouncer) "+
		"started in front of the database, with the direct connection for LISTEN (Config.ListenURL)")
	fs.StringVar(&cfg.pgbouncer, "pgbouncer", env.getenv("JOURNEY_PGBOUNCER"), "-pooler's pgbouncer `program` (default "+
		"$JOURNEY_PGBOUNCER, else Debian's): from PgBouncer 1.21 on, with max_prepared_statements, and the replicas "+
		"prepare their statements by name")
	fs.StringVar(&cfg.start, "start", "set", "open loop: how each execution starts, and what its latency times: set (Start, "+
		"then Set the input; from the Set), values (Start with the input; from the Start), or tx (StartTx with the input in a "+
		"transaction of its own, then COMMIT; from the BEGIN)")
	fs.BoolVar(&cfg.fromCommit, "from-commit", false, "-start tx: time each execution from the application's COMMIT, "+
		"not from its BEGIN: what the runtime adds once the application commits")
	fs.IntVar(&cfg.priorities, "priorities", 0, "drain: start the executions with priorities 0 to `P` in turn (journey.WithPriorities), "+
		"for what priorities cost a claim beside a run without")
	fs.BoolVar(&cfg.keyed, "keyed", false, "start each execution with a key of its own (journey.WithKey, WithKeys), "+
		"for what a keyed Start costs beside an unkeyed one")
	fs.DurationVar(&cfg.heartbeat, "heartbeat", 0, "the compute nodes' heartbeat `interval`, their heartbeat timeout 10 times it "+
		"(default the graph's: 10s, 30s)")
	if code, ok := parseFlags(fs, args); !ok {
		return cfg, code, false
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	bad := func(format string, a ...any) (benchConfig, int, bool) {
		fmt.Fprintf(env.stderr, "journey bench: "+format+"\n", a...)
		return cfg, 2, false
	}
	cfg.prunable = set["finished-age"]
	switch {
	case fs.NArg() > 0:
		return bad("unexpected arguments %q", fs.Args())
	case set["pgbouncer"] && !cfg.pooler:
		return bad("-pgbouncer applies to -pooler only")
	case set["n"] && (set["duration"] || set["rate"]):
		return bad("-n (drain) cannot be combined with -duration or -rate")
	case set["n"]:
		cfg.mode = "drain"
	case set["rate"] && !set["duration"]:
		return bad("-rate needs -duration: for how long to start executions at that rate")
	case set["rate"]:
		cfg.mode = "rate"
	case set["duration"]:
		cfg.mode = "continuous"
		if !set["producers"] {
			cfg.producers = 1
		}
	default:
		return bad("give -n N (drain), -duration D (continuous), or -rate R with -duration D (open loop)")
	}
	switch {
	case set["start"] && cfg.mode != "rate":
		return bad("-start applies to the open loop (-rate) only")
	case cfg.start != "set" && cfg.start != "values" && cfg.start != "tx":
		return bad("-start %q is not one of set, values, tx", cfg.start)
	case cfg.fromCommit && cfg.start != "tx":
		return bad("-from-commit applies to -start tx only")
	}
	if _, ok := benchShapes[cfg.shape]; !ok {
		return bad("-graph %q is not one of one, chain5, fanout10, gated, ratelimited, map1000", cfg.shape)
	}
	switch {
	case cfg.shape != "gated" && set["max-parallel"]:
		return bad("-max-parallel applies to -graph gated only")
	case cfg.shape != "gated" && cfg.shape != "ratelimited" && set["keys"]:
		return bad("-keys applies to -graph gated and ratelimited only")
	case cfg.shape != "ratelimited" && (set["rate-limit"] || set["rate-per"]):
		return bad("-rate-limit and -rate-per apply to -graph ratelimited only")
	case cfg.shape == "gated" && cfg.keys == 0 && cfg.maxParallel == 0:
		return bad("-graph gated needs -keys or -max-parallel above 0: else its node is not gated")
	}
	for _, f := range []struct {
		name  string
		value float64
		min   float64
	}{
		{"n", float64(cfg.n), 1}, {"duration", cfg.duration.Seconds(), 0.001}, {"rate", cfg.rate, 0.001},
		{"replicas", float64(cfg.replicas), 1}, {"workers", float64(cfg.workers), 1},
		{"producers", float64(cfg.producers), 1}, {"backlog", float64(cfg.backlog), 1},
		{"finished-rows", float64(cfg.finishedRows), 0}, {"finished-age", cfg.finishedAge.Seconds(), 0},
		{"top-statements", float64(cfg.topStatements), 0}, {"hold", cfg.hold.Seconds(), 0},
		{"heartbeat", cfg.heartbeat.Seconds(), 0.001}, {"keys", float64(cfg.keys), 0},
		{"max-parallel", float64(cfg.maxParallel), 0}, {"paused", float64(cfg.paused), 0},
		{"rated", float64(cfg.rated), 0}, {"rate-limit", float64(cfg.rateLimit), 1}, {"rate-per", cfg.ratePer.Seconds(), 0.001},
	} {
		if (set[f.name] || f.name == "replicas" || f.name == "workers" || f.name == "producers") && f.value < f.min {
			return bad("-%s is %s: it must be at least %g", f.name, fs.Lookup(f.name).Value, f.min)
		}
	}
	return cfg, 0, true
}

// startBenchCluster starts a throwaway cluster with pg_stat_statements loaded, or without it
// if the server cannot load it. A durable one flushes its WAL at each commit, as PostgreSQL's
// defaults do, unlike the tests' clusters: what a user's server costs.
func startBenchCluster(ctx context.Context, logger *slog.Logger, durable bool) (*devpg.Cluster, error) {
	var opts []devpg.Option
	if durable {
		for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes"} {
			opts = append(opts, devpg.Setting(name, "on"))
		}
	}
	c, err := devpg.Start(ctx, logger, append(opts, devpg.Setting("shared_preload_libraries", "pg_stat_statements"),
		devpg.Setting("pg_stat_statements.track_planning", "on"))...)
	if err == nil || errors.Is(err, devpg.ErrNoBinaries) || ctx.Err() != nil {
		return c, err
	}
	logger.Warn("PostgreSQL did not start with pg_stat_statements; starting it without, so statement counts are n/a",
		"error", err)
	return devpg.Start(ctx, logger, opts...)
}

// riverBenchWorkers is the MaxWorkers of river bench's queue, and so bench's: the two measure
// the same way, with the same number of functions running at once.
const riverBenchWorkers = 2000

// benchmark is one run of journey bench.
type benchmark struct {
	cfg        benchConfig
	env        *environment
	url        string
	replicaURL string              // the replicas' DatabaseURL: url, or with -pooler a PgBouncer's (see bounce)
	bouncer    devpg.BouncerConfig // -pooler's PgBouncer (see choosePooler)
	nodes      []benchNode
	logger     *slog.Logger // the replicas' logger: warnings and errors only
	db         *monitor

	// What the measuring replicas saved, counted by OnSave.
	done, failed atomic.Int64
	progressed   chan struct{} // a signal after each save, or end of an open-loop execution
	measured     *graph.Graph  // the graph of the measured replicas
	started      atomic.Int64  // executions whose input is set
	ids          idList        // their ids
	inputs       atomic.Int64  // the last input given (see input)
	keys         atomic.Int64  // the last key given (see key)
	// The measured computations running at once in this process, and the most seen.
	running, maxRunning atomic.Int64
	// The schema's row writes before the first execution started.
	rowsBase map[string]tableWrites

	mu        sync.Mutex
	latencies []time.Duration // rate mode: from Set (or Start, or BEGIN: -start) to the last Get

	app *pgxpool.Pool // -start tx: the application's connections, which begin the transactions
}

// benchResult is what a run measured.
type benchResult struct {
	elapsed                  time.Duration // the measured time that computations/s divides
	computations             int64         // finished in elapsed
	backlogStart, backlogEnd int64         // computations left to do, of the executions started
	p50, p99                 time.Duration // rate mode only
	executions               int64
	totalComputations        int64 // finished in the whole run, tail included
	failed, unfinished       int64
	statements, transactions int64                  // -1 when not known
	heartbeats               int64                  // the replicas' heartbeat UPDATEs; -1 when not known
	rowWrites                map[string]tableWrites // of each table of the schema, from the first Start on
	topStatements            []statementCalls
	// -graph gated: its promotions at the start and the end of the measured time, and the most
	// computations seen running at once.
	promotedStart, promotedEnd promotionStats
	maxRunning                 int64
	// The bench process's own use over the measured time: its CPU (user and system, from its
	// rusage; -1 if unknown) and the objects it allocated. It runs the replicas and producers,
	// not PostgreSQL.
	goCPU  time.Duration
	allocs uint64
	// The PostgreSQL server's CPU over the measured time, all its processes (see serverCPU); -1
	// when it is not known.
	pgCPU time.Duration
	// drain: how long the first and the last tenth of the computations (tenth of them) took.
	firstTenth, lastTenth time.Duration
	tenth                 int64
}

func (r benchResult) line(cfg benchConfig) string {
	na := "n/a"
	rate := na
	if r.elapsed > 0 {
		rate = fmt.Sprintf("%.1f", float64(r.computations)/r.elapsed.Seconds())
	}
	p50, p99 := na, na
	if cfg.mode == "rate" {
		p50, p99 = fmt.Sprintf("%.1f", ms(r.p50)), fmt.Sprintf("%.1f", ms(r.p99))
	}
	perComputation := func(n int64) string {
		if n < 0 || r.totalComputations == 0 {
			return na
		}
		return fmt.Sprintf("%.2f", float64(n)/float64(r.totalComputations))
	}
	// The heartbeat statements of a replica per heartbeat interval, over the measured time.
	beats := na
	if intervals := r.elapsed.Seconds() / cfg.heartbeatInterval().Seconds(); r.heartbeats >= 0 && intervals > 0 {
		beats = fmt.Sprintf("%.2f", float64(r.heartbeats)/float64(cfg.replicas)/intervals)
	}
	writes := na
	if r.executions > 0 {
		var n int64
		for _, w := range r.rowWrites {
			n += w.total()
		}
		writes = fmt.Sprintf("%.2f", float64(n)/float64(r.executions))
	}
	goCPU, allocs, pgCPU := na, na, na
	if r.computations > 0 {
		if r.goCPU >= 0 {
			goCPU = fmt.Sprintf("%.1f", float64(r.goCPU.Microseconds())/float64(r.computations))
		}
		allocs = fmt.Sprintf("%.0f", float64(r.allocs)/float64(r.computations))
		if r.pgCPU >= 0 {
			pgCPU = fmt.Sprintf("%.1f", float64(r.pgCPU.Microseconds())/float64(r.computations))
		}
	}
	// The wall time per computation of the drain's first and last tenth.
	start, end := na, na
	if r.tenth > 0 {
		start = fmt.Sprintf("%.1f", float64(r.firstTenth.Microseconds())/float64(r.tenth))
		end = fmt.Sprintf("%.1f", float64(r.lastTenth.Microseconds())/float64(r.tenth))
	}
	return fmt.Sprintf("bench: mode=%s graph=%s computations/s=%s p50_ms=%s p99_ms=%s statements_per_computation=%s "+
		"transactions_per_computation=%s row_writes_per_execution=%s go_cpu_us_per_computation=%s allocs_per_computation=%s "+
		"pg_cpu_us_per_computation=%s us_per_computation_start=%s us_per_computation_end=%s "+
		"replicas=%d workers=%d executions=%d computations=%d elapsed_s=%.2f "+
		"backlog_start=%d backlog_end=%d failed=%d unfinished=%d heartbeat_statements_per_interval=%s keyed=%t",
		cfg.mode, cfg.shape, rate, p50, p99, perComputation(r.statements), perComputation(r.transactions), writes, goCPU, allocs,
		pgCPU, start, end, cfg.replicas, cfg.workers, r.executions, r.totalComputations, r.elapsed.Seconds(),
		r.backlogStart, r.backlogEnd, r.failed, r.unfinished, beats, cfg.keyed) + r.gatedFields(cfg) + priorityField(cfg)
}

// gatedFields are the figures of -graph gated, over the measured time: the gated attempts
// promoted a second, the promotion passes (each runs one SELECT of candidates) and their mean
// time, executing and planning their statements, the slowest SELECT of candidates, the gated
// attempts PENDING at the start and the end, and the most computations running at once.
func (r benchResult) gatedFields(cfg benchConfig) string {
	if cfg.shape != "gated" {
		return ""
	}
	na := "n/a"
	promotions := na
	if r.elapsed > 0 {
		promotions = fmt.Sprintf("%.1f", float64(r.promotedEnd.admitted-r.promotedStart.admitted)/r.elapsed.Seconds())
	}
	passes, passMs, maxMs := na, na, na
	if start, end := r.promotedStart, r.promotedEnd; start.passes >= 0 && end.passes >= 0 {
		n := end.passes - start.passes
		passes = strconv.FormatInt(n, 10)
		if n > 0 {
			passMs = fmt.Sprintf("%.3f", (end.passMs-start.passMs)/float64(n))
			maxMs = fmt.Sprintf("%.3f", end.chooseMaxMs)
		}
	}
	return fmt.Sprintf(" keys=%d max_parallel=%d promotions_per_s=%s promote_passes=%s promote_pass_ms=%s "+
		"promote_choose_ms_max=%s pending_start=%d pending_end=%d max_running=%d",
		cfg.keys, cfg.maxParallel, promotions, passes, passMs, maxMs,
		r.promotedStart.pending, r.promotedEnd.pending, r.maxRunning)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// run sets up the schema, the finished rows and (for drain) the ready executions, then starts
// the replicas and measures them.
func (b *benchmark) run(ctx context.Context) (res benchResult, err error) {
	db, err := connectMonitor(ctx, b.url)
	if err != nil {
		return res, err
	}
	b.db = db
	defer db.close()
	if err := db.createSchema(ctx, &b.cfg.schema); err != nil {
		return res, err
	}
	defer func() {
		if dropErr := db.dropSchema(b.cfg.schema); dropErr != nil {
			err = errors.Join(err, dropErr)
		}
	}()
	statements, note := db.enableStatements(ctx)
	if note != "" {
		fmt.Fprintf(b.env.stdout, "bench: statements_per_computation is n/a: %s\n", note)
	}
	fmt.Fprintf(b.env.stdout, "bench: mode=%s graph=%s replicas=%d workers=%d schema=%s database=%s\n",
		b.cfg.mode, b.cfg.shape, b.cfg.replicas, b.cfg.workers, b.cfg.schema, db.describe())
	if err := b.choosePooler(ctx); err != nil {
		return res, err
	}

	unbounce, err := b.bounce(ctx)
	if err != nil {
		return res, err
	}
	err = b.setUp(ctx)
	unbounce()
	if err != nil {
		return res, err
	}
	if err := b.waitReplicasGone(ctx); err != nil {
		return res, err
	}
	base, err := db.snapshot(ctx, statements)
	if err != nil {
		return res, err
	}
	// PgBouncer starts before the measured time, which starts with the replicas.
	if unbounce, err = b.bounce(ctx); err != nil {
		return res, err
	}
	defer unbounce()

	res.backlogStart = b.backlog()
	if res.promotedStart, err = b.promotions(ctx); err != nil {
		return res, err
	}
	stopProfile, err := startCPUProfile(b.cfg.cpuProfile)
	if err != nil {
		return res, err
	}
	defer stopProfile()
	if err := writeHeapProfile(b.cfg.memProfile, ".start"); err != nil {
		return res, err
	}
	use, server := processNow(), b.db.serverCPU(ctx)
	began := time.Now()
	progressDone := b.printProgress(began)
	defer progressDone()
	rts, err := b.startReplicas(ctx)
	if err != nil {
		return res, err
	}
	stopped := false
	stopAll := func() error {
		if stopped {
			return nil
		}
		stopped = true
		return stopReplicas(rts)
	}
	defer func() {
		if stopErr := stopAll(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
	}()
	switch b.cfg.mode {
	case "drain":
		err = b.drain(ctx, began, &res) // timed from the replicas' start: they claim as they start
	case "continuous":
		err = b.continuous(ctx, rts, &res)
	case "rate":
		err = b.openLoop(ctx, rts, &res)
	}
	if err == nil && b.cfg.mode != "continuous" { // which reads them at the end of D
		res.promotedEnd, err = b.promotions(ctx)
	}
	res.maxRunning = b.maxRunning.Load()
	res.goCPU, res.allocs = use.since()
	res.pgCPU = -1
	if now := b.db.serverCPU(ctx); server >= 0 && now >= server {
		res.pgCPU = now - server
	}
	stopProfile()
	if err := writeHeapProfile(b.cfg.memProfile, ""); err != nil {
		return res, err
	}
	progressDone()
	if err != nil {
		return res, err
	}
	if err := stopAll(); err != nil {
		return res, err
	}
	unbounce()

	if err := b.waitReplicasGone(ctx); err != nil {
		return res, err
	}
	end, err := db.snapshot(ctx, false)
	if err != nil {
		return res, err
	}
	res.statements, res.transactions, res.heartbeats = end.statementsSince(base), end.transactionsSince(base), end.heartbeatsSince(base)
	if res.rowWrites, err = db.rowWrites(ctx, b.cfg.schema); err != nil {
		return res, err
	}
	for table, base := range b.rowsBase {
		w := res.rowWrites[table]
		res.rowWrites[table] = tableWrites{w.ins - base.ins, w.upd - base.upd, w.hot - base.hot, w.del - base.del}
	}
	if others := max(base.others, end.others); others > 0 {
		fmt.Fprintf(b.env.stdout, "bench: statements and transactions are n/a: %d other session(s) use database %s, "+
			"and their work would be counted; run bench on a database of its own\n", others, db.describe())
		res.statements, res.transactions, res.heartbeats = -1, -1, -1
	}
	if statements && b.cfg.topStatements > 0 {
		if res.topStatements, err = db.topStatements(ctx, b.cfg.topStatements); err != nil {
			return res, err
		}
	}
	res.executions = b.started.Load()
	res.totalComputations = b.done.Load()
	res.failed = b.failed.Load()
	finished, err := db.finishedExecutions(ctx, b.cfg.schema, b.ids.all(), b.leaves())
	if err != nil {
		return res, err
	}
	res.unfinished = res.executions - finished
	b.printRowWrites(res)
	b.printTopStatements(res)
	return res, nil
}

// setUp runs a setup replica, which migrates the schema, inserts the finished rows and, for
// drain, makes the N executions ready. Its computations wait while it preloads, and it is
// stopped before the measured replicas start, so that it leaves all the work to them.
func (b *benchmark) setUp(ctx context.Context) (err error) {
	var hold atomic.Bool
	// An OnSave that counts nothing: the measured replicas count the saves with theirs, and the
	// two must be one definition of the graph's version (graph.Description).
	g := b.graph(func(ctx context.Context) error {
		if hold.Load() {
			<-ctx.Done() // released to the measured replicas by Stop
			return ctx.Err()
		}
		return nil
	}, append(b.nodeOptions(), graph.OnSave(func(context.Context, graph.SaveEvent) {}))...)
	cfg := b.runtimeConfig(g, "setup", 1)
	// No sweep: the computation it holds during a long preload would pass its deadline, and
	// be abandoned instead of released.
	cfg.SweepInterval = 24 * time.Hour
	rt, err := journey.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		// A cancelled context: Stop releases the held computation at once, with its attempt.
		stopCtx, cancel := context.WithCancel(context.Background())
		cancel()
		if stopErr := rt.Stop(stopCtx); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stopping the setup replica: %w", stopErr))
		}
	}()

	if b.cfg.finishedRows > 0 {
		began := time.Now()
		ex, err := rt.Start(ctx, g)
		if err != nil {
			return fmt.Errorf("starting the template of the finished executions: %w", err)
		}
		sets := 1
		if b.cfg.prunable { // its input set twice, it has what retention deletes
			sets = 2
		}
		for x := range sets {
			rev, err := rt.Set(ctx, ex.ID, "x", x)
			if err != nil {
				return fmt.Errorf("setting the template's input: %w", err)
			}
			for _, leaf := range b.leaves() {
				if _, err := rt.Get(ctx, ex.ID, leaf, journey.WaitNewerThan(rev)); err != nil {
					return fmt.Errorf("waiting for the template's %s: %w", leaf, err)
				}
			}
		}
		if err := b.db.cloneFinished(ctx, b.cfg.schema, ex.ID, b.cfg.finishedRows-1, b.cfg.finishedAge); err != nil {
			return err
		}
		took := time.Since(began).Round(time.Millisecond)
		size, err := b.db.schemaSize(ctx, b.cfg.schema)
		if err != nil {
			return err
		}
		fmt.Fprintf(b.env.stdout, "bench: inserted %d finished executions in %s; the schema takes %d MB on disk\n",
			b.cfg.finishedRows, took, size>>20)
	}
	if b.cfg.paused > 0 {
		if err := rt.PauseGraph(ctx, pausedGraph.Name(), pausedGraph.Version()); err != nil {
			return err
		}
		if err := b.startWaiting(ctx, rt, pausedGraph, b.cfg.paused, "paused"); err != nil {
			return err
		}
	}
	if b.cfg.rated > 0 {
		if err := b.startWaiting(ctx, rt, ratedGraph, b.cfg.rated, "rate-limited"); err != nil {
			return err
		}
	}
	if b.rowsBase, err = b.db.rowWrites(ctx, b.cfg.schema); err != nil {
		return err
	}
	ready := b.cfg.n
	switch {
	case b.cfg.mode == "continuous" && b.cfg.shape == "gated":
		// Its backlog waits from the start of D, so that its promotions are measured with it.
		ready = b.cfg.backlog / len(b.nodes)
	case b.cfg.mode != "drain":
		return nil
	}

	hold.Store(true)
	began := time.Now()
	eg, ectx := errgroup.WithContext(ctx)
	var next atomic.Int64
	for range b.cfg.producers {
		eg.Go(func() error {
			for {
				first := next.Add(startBatch) - startBatch
				if first >= int64(ready) {
					return nil
				}
				if err := b.startReady(ectx, rt, g, int(min(startBatch, int64(ready)-first))); err != nil {
					return err
				}
			}
		})
	}
	if err := eg.Wait(); err != nil {
		return err
	}
	took := time.Since(began)
	fmt.Fprintf(b.env.stdout, "bench: made %d executions ready in %s (%.0f/s, %d producers, StartMany of %d)\n",
		ready, took.Round(time.Millisecond), float64(ready)/took.Seconds(), b.cfg.producers, startBatch)
	return nil
}

// bounce sets the replicas' URL: with -pooler, that of a PgBouncer it starts in front of the
// database, and stops with the function it returns, which closes the server connections that
// PgBouncer keeps for the replicas, so that waitReplicasGone sees them end; without, the
// database's. The function may be called more than once.
func (b *benchmark) bounce(ctx context.Context) (func(), error) {
	b.replicaURL = b.url
	if !b.cfg.pooler {
		return func() {}, nil
	}
	bouncer, err := devpg.StartBouncerWith(ctx, b.url, b.bouncer)
	if err != nil {
		return nil, fmt.Errorf("-pooler: %w", err)
	}
	b.replicaURL = bouncer.URL()
	if b.bouncer.MaxPreparedStatements > 0 && !strings.Contains(b.url, "default_query_exec_mode") {
		b.replicaURL = withParam(b.replicaURL, "default_query_exec_mode", "cache_statement")
	}
	return func() {
		if err := bouncer.Stop(); err != nil {
			fmt.Fprintf(b.env.stderr, "journey bench: stopping pgbouncer: %v\n", err)
		}
	}, nil
}

// benchPreparedStatements is the max_prepared_statements of a PgBouncer 1.21 or later: PgBouncer's
// default from 1.24 on, and more than the runtime prepares.
const benchPreparedStatements = 200

// choosePooler sets up -pooler's PgBouncer as docs/operating.md recommends, and says which it
// is. Its connect_query gives each server connection the plan settings that the runtime gives
// its direct connections (persistence.PlanSettings), and cannot give a pooler's. From 1.21 on, it
// keeps prepared statements (max_prepared_statements), and bounce has the replicas prepare
// theirs by name.
func (b *benchmark) choosePooler(ctx context.Context) error {
	if !b.cfg.pooler {
		return nil
	}
	version, prepares, err := devpg.BouncerVersion(ctx, b.cfg.pgbouncer)
	if err != nil {
		return fmt.Errorf("-pooler: %w", err)
	}
	var sets []string
	for _, name := range slices.Sorted(maps.Keys(persistence.PlanSettings)) {
		sets = append(sets, "SET "+name+" = "+persistence.PlanSettings[name])
	}
	b.bouncer = devpg.BouncerConfig{Program: b.cfg.pgbouncer, ConnectQuery: strings.Join(sets, "; ")}
	how := "without max_prepared_statements, the replicas' default_query_exec_mode=cache_describe"
	if prepares {
		b.bouncer.MaxPreparedStatements = benchPreparedStatements
		how = fmt.Sprintf("with max_prepared_statements = %d, the replicas' default_query_exec_mode=cache_statement",
			benchPreparedStatements)
	}
	fmt.Fprintf(b.env.stdout, "bench: through PgBouncer %s %s, and connect_query = '%s'\n", version, how, b.bouncer.ConnectQuery)
	return nil
}

// promotions reads the gated node's promotions, for -graph gated.
func (b *benchmark) promotions(ctx context.Context) (promotionStats, error) {
	if b.cfg.shape != "gated" {
		return promotionStats{}, nil
	}
	return b.db.promotions(ctx, b.cfg.schema)
}

// waitReplicasGone waits until the replicas' connections have ended, and warns if some do not.
func (b *benchmark) waitReplicasGone(ctx context.Context) error {
	left, err := b.db.waitReplicasGone(ctx)
	if left > 0 {
		fmt.Fprintf(b.env.stdout, "bench: %d connection(s) of the replicas are still open; "+
			"the transaction count may miss some\n", left)
	}
	return err
}

// startBatch is how many executions a producer starts at a time, with StartMany.
const startBatch = 100

// topUpEvery is how often the producers of the continuous mode look at the backlog, once it is
// full.
const topUpEvery = 250 * time.Millisecond

// startReady starts n executions with their input set, in one StartMany, and counts them as
// started.
func (b *benchmark) startReady(ctx context.Context, rt *journey.Runtime, g *graph.Graph, n int) error {
	inputs, keys, prios := make([]map[string]any, n), make([]string, n), make([]int, n)
	for i := range inputs {
		x := b.input()
		inputs[i], keys[i], prios[i] = map[string]any{"x": x}, b.key(), x%(b.cfg.priorities+1)
	}
	exs, err := rt.StartMany(ctx, g, inputs, journey.WithKeys(keys), journey.WithPriorities(prios))
	if err != nil {
		return fmt.Errorf("starting executions: %w", err)
	}
	for _, ex := range exs {
		b.ids.add(ex.ID)
	}
	b.started.Add(int64(n))
	return nil
}

// graph builds the bench graph. Each computation calls before, then adds 1 to its input.
func (b *benchmark) graph(before func(ctx context.Context) error, opts ...graph.NodeOption) *graph.Graph {
	nodes := []graph.Node{graph.Input("x")}
	for _, n := range b.nodes {
		needs := n.needs
		nodes = append(nodes, graph.Compute(n.name, graph.Needs(needs), func(ctx context.Context, in graph.Values) (any, error) {
			if err := before(ctx); err != nil {
				return nil, err
			}
			return in.Int(needs) + 1, nil
		}, opts...))
	}
	return graph.MustNew("bench-"+b.cfg.shape, "v1", nodes)
}

// nodeOptions are the options of the compute nodes, for the setup and the measured replicas
// alike: the heartbeat, the concurrency key and the limit are written into each computation as
// it is made ready.
func (b *benchmark) nodeOptions() []graph.NodeOption {
	var opts []graph.NodeOption
	if b.cfg.heartbeat > 0 {
		opts = append(opts, graph.Heartbeat(b.cfg.heartbeat, 10*b.cfg.heartbeat))
	}
	if b.cfg.shape == "ratelimited" {
		var rateOpts []graph.RateOption
		if keys := b.cfg.keys; keys > 0 {
			rateOpts = append(rateOpts, graph.RateKey(func(in graph.Values) string {
				return strconv.FormatInt(in.Int("x")%int64(keys), 10)
			}))
		}
		return append(opts, graph.RateLimit(b.cfg.rateLimit, b.cfg.ratePer, rateOpts...))
	}
	if b.cfg.shape != "gated" {
		return opts
	}
	if keys := b.cfg.keys; keys > 0 {
		opts = append(opts, graph.ConcurrencyKey(func(in graph.Values) string {
			return strconv.FormatInt(in.Int("x")%int64(keys), 10)
		}))
	}
	if b.cfg.maxParallel > 0 {
		opts = append(opts, graph.MaxParallel(b.cfg.maxParallel))
	}
	return opts
}

// priorityField is the result line's field of -priorities, "" without it.
func priorityField(cfg benchConfig) string {
	if cfg.priorities == 0 {
		return ""
	}
	return fmt.Sprintf(" priorities=%d", cfg.priorities)
}

// key is the key of the next execution: with -keyed, bench-1, bench-2…, each held by one
// execution; else "", no key.
func (b *benchmark) key() string {
	if !b.cfg.keyed {
		return ""
	}
	return "bench-" + strconv.FormatInt(b.keys.Add(1), 10)
}

// input is the value of x of the next execution: 1, 2, 3…, so that -graph gated spreads its
// executions over its keys.
func (b *benchmark) input() int { return int(b.inputs.Add(1)) }

// measure is what a measured computation does before it returns: it blocks for -hold, and
// counts the computations running at once in this process, with the most seen.
func (b *benchmark) measure(ctx context.Context) error {
	n := b.running.Add(1)
	defer b.running.Add(-1)
	for seen := b.maxRunning.Load(); n > seen && !b.maxRunning.CompareAndSwap(seen, n); {
		seen = b.maxRunning.Load()
	}
	return b.holdFor(ctx)
}

// holdFor blocks for -hold, or until ctx ends, before a measured computation returns.
func (b *benchmark) holdFor(ctx context.Context) error {
	if b.cfg.hold <= 0 {
		return nil
	}
	t := time.NewTimer(b.cfg.hold)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leaves are the compute nodes that no node needs: an execution has finished when they are set.
func (b *benchmark) leaves() []string {
	needed := map[string]bool{}
	for _, n := range b.nodes {
		needed[n.needs] = true
	}
	var leaves []string
	for _, n := range b.nodes {
		if !needed[n.name] {
			leaves = append(leaves, n.name)
		}
	}
	return leaves
}

func (b *benchmark) runtimeConfig(g *graph.Graph, name string, workers int) journey.Config {
	conn := withParam(b.replicaURL, "application_name", benchAppName)
	if b.cfg.mode == "rate" {
		conn = warmPool(conn)
	}
	listen := ""
	if b.cfg.pooler {
		listen = b.url
	}
	graphs := []*graph.Graph{g}
	if b.cfg.paused > 0 {
		graphs = append(graphs, pausedGraph)
	}
	if b.cfg.rated > 0 {
		graphs = append(graphs, ratedGraph)
	}
	return journey.Config{
		DatabaseURL: conn,
		ListenURL:   listen,
		Schema:      b.cfg.schema,
		Graphs:      graphs,
		ReplicaID:   fmt.Sprintf("bench-%s-%d", name, os.Getpid()),
		MaxWorkers:  workers,
		Logger:      b.logger,
	}
}

// pausedGraph is the graph of -paused: its version is paused before its executions start.
var pausedGraph = graph.MustNew("bench_paused", "v1", []graph.Node{
	graph.Input("x"),
	graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) { return in.Int("x"), nil }),
})

// startWaiting starts n executions of g, the graph of -paused (whose version is paused) or of
// -rated, whose computations wait beside the measured work, described as what.
func (b *benchmark) startWaiting(ctx context.Context, rt *journey.Runtime, g *graph.Graph, n int, what string) error {
	began := time.Now()
	for done := 0; done < n; {
		inputs := make([]map[string]any, min(1000, n-done))
		for i := range inputs {
			inputs[i] = map[string]any{"x": done + i}
		}
		if _, err := rt.StartMany(ctx, g, inputs); err != nil {
			return fmt.Errorf("starting the %s executions: %w", what, err)
		}
		done += len(inputs)
	}
	fmt.Fprintf(b.env.stdout, "bench: started %d executions of the %s graph %s in %s\n",
		n, what, g.Name(), time.Since(began).Round(time.Millisecond))
	return nil
}

// ratedGraph is the graph of -rated: its node allows 1 start a day per key, of 10.
var ratedGraph = graph.MustNew("bench_rated", "v1", []graph.Node{
	graph.Input("x"),
	graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) { return in.Int("x"), nil },
		graph.RateLimit(1, 24*time.Hour, graph.RateKey(func(in graph.Values) string { return strconv.FormatInt(in.Int("x")%10, 10) }))),
})

// startReplicas starts the measured replicas, at once.
func (b *benchmark) startReplicas(ctx context.Context) ([]*journey.Runtime, error) {
	g := b.graph(b.measure, append(b.nodeOptions(), graph.OnSave(func(_ context.Context, e graph.SaveEvent) {
		if e.Err != nil {
			b.failed.Add(1)
		} else {
			b.done.Add(1)
		}
		b.signal()
	}))...)
	b.measured = g
	rts := make([]*journey.Runtime, b.cfg.replicas)
	var eg errgroup.Group
	for i := range rts {
		eg.Go(func() error {
			cfg := b.runtimeConfig(g, "replica"+strconv.Itoa(i+1), b.cfg.workers)
			cfg.SkipMigrations = true // the setup replica migrated
			rt, err := journey.New(ctx, cfg)
			rts[i] = rt
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, errors.Join(err, stopReplicas(rts))
	}
	return rts, nil
}

// stopReplicas stops the replicas that started, at once.
func stopReplicas(rts []*journey.Runtime) error {
	var eg errgroup.Group
	for _, rt := range rts {
		if rt == nil {
			continue
		}
		eg.Go(func() error {
			ctx, cancel := context.WithTimeout(context.Background(), benchStopTimeout)
			defer cancel()
			return rt.Stop(ctx)
		})
	}
	return eg.Wait()
}

// finishedComputations is the number of computations the replicas have saved or failed.
func (b *benchmark) finishedComputations() int64 { return b.done.Load() + b.failed.Load() }

// backlog is the number of computations left to do, of the executions started.
func (b *benchmark) backlog() int64 {
	return b.started.Load()*int64(len(b.nodes)) - b.finishedComputations()
}

// signal wakes waitUntil.
func (b *benchmark) signal() {
	select {
	case b.progressed <- struct{}{}:
	default:
	}
}

// waitUntil waits until finished holds, checking it at each signal. It gives up when no
// computation has finished for benchStallTimeout (the check of the executions then reports
// what is left), or when ctx ends. It returns when the last computation it saw finished.
func (b *benchmark) waitUntil(ctx context.Context, finished func() bool) (time.Time, error) {
	last := time.Now()
	stall := time.NewTimer(benchStallTimeout)
	defer stall.Stop()
	for seen := b.finishedComputations(); !finished(); {
		select {
		case <-b.progressed:
			if n := b.finishedComputations(); n > seen {
				seen, last = n, time.Now()
				stall.Reset(benchStallTimeout)
			}
		case <-stall.C:
			b.env.logger.Error("no computation finished for a while; giving up the wait",
				"waited", benchStallTimeout, "backlog", b.backlog())
			return last, nil
		case <-ctx.Done():
			return last, ctx.Err()
		}
	}
	return last, nil
}

// drain waits for the replicas to finish the ready executions.
//
// It also times the first and the last tenth of the computations (res.firstTenth, lastTenth): a
// cost per computation that grows with the backlog makes the first slower than the last.
func (b *benchmark) drain(ctx context.Context, began time.Time, res *benchResult) error {
	total := b.backlog()
	var tenth, nineTenths, end time.Time
	last, err := b.waitUntil(ctx, func() bool {
		n, now := b.finishedComputations(), time.Now()
		if tenth.IsZero() && n*10 >= total {
			tenth = now
		}
		if nineTenths.IsZero() && n*10 >= total*9 {
			nineTenths = now
		}
		if b.backlog() == 0 {
			end = now
		}
		return !end.IsZero()
	})
	res.elapsed, res.computations, res.backlogEnd = last.Sub(began), b.finishedComputations(), b.backlog()
	if err == nil && res.backlogEnd == 0 && total >= 10 {
		res.firstTenth, res.lastTenth = tenth.Sub(began), end.Sub(nineTenths)
		res.tenth = total / 10
	}
	return err
}

// continuous runs the producers for the duration while the replicas work, then waits for the
// work left.
func (b *benchmark) continuous(ctx context.Context, rts []*journey.Runtime, res *benchResult) error {
	began := time.Now()
	window := time.NewTimer(b.cfg.duration)
	defer window.Stop()
	stop := make(chan struct{})
	eg, ectx := errgroup.WithContext(ctx)
	for i := range b.cfg.producers {
		rt := rts[i%len(rts)]
		eg.Go(func() error {
			for {
				if b.backlog() >= int64(b.cfg.backlog) {
					select {
					case <-stop:
						return nil
					case <-time.After(topUpEvery):
					}
					continue
				}
				select {
				case <-stop:
					return nil
				default:
				}
				if err := b.startReady(ectx, rt, b.measured, startBatch); err != nil {
					return err
				}
			}
		})
	}
	select {
	case <-window.C:
	case <-ectx.Done():
	}
	res.elapsed, res.computations, res.backlogEnd = time.Since(began), b.finishedComputations(), b.backlog()
	var err error
	res.promotedEnd, err = b.promotions(ctx) // the gated backlog's, before the tail
	close(stop)
	if err := errors.Join(err, eg.Wait()); err != nil {
		return err
	}
	_, err = b.waitUntil(ctx, func() bool { return b.backlog() == 0 })
	return err
}

// appConns is the size of the application's pool of -start tx: pgxpool's default, 4 on 2 cores,
// held each for a BEGIN, a StartTx and a COMMIT, could not keep up with 500 a second.
const appConns = 40

// startOne starts an execution of the open loop, as -start says, and returns it and when its
// latency began.
func (b *benchmark) startOne(ctx context.Context, rt *journey.Runtime) (*journey.Execution, time.Time, error) {
	t0 := time.Now()
	values := journey.WithValues(map[string]any{"x": b.input()})
	switch b.cfg.start {
	case "values":
		ex, err := rt.Start(ctx, b.measured, journey.WithKey(b.key()), values)
		if err != nil {
			return nil, t0, fmt.Errorf("starting an execution: %w", err)
		}
		return ex, t0, nil
	case "tx":
		tx, err := b.app.Begin(ctx)
		if err != nil {
			return nil, t0, fmt.Errorf("beginning a transaction: %w", err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		ex, err := rt.StartTx(ctx, tx, b.measured, journey.WithKey(b.key()), values)
		if err == nil {
			err = tx.Commit(ctx)
		}
		if b.cfg.fromCommit {
			t0 = time.Now()
		}
		if err != nil {
			return nil, t0, fmt.Errorf("starting an execution in a transaction: %w", err)
		}
		return ex, t0, nil
	}
	ex, err := rt.Start(ctx, b.measured, journey.WithKey(b.key()))
	if err != nil {
		return nil, t0, fmt.Errorf("starting an execution: %w", err)
	}
	t0 = time.Now()
	if _, err := rt.Set(ctx, ex.ID, "x", b.input()); err != nil {
		return nil, t0, fmt.Errorf("setting the input of %s: %w", ex.ID, err)
	}
	return ex, t0, nil
}

// openLoop starts executions at the rate for the duration, each in a goroutine of its own that
// sets the input and waits for the leaves, then waits for them all.
func (b *benchmark) openLoop(ctx context.Context, rts []*journey.Runtime, res *benchResult) error {
	if b.cfg.start == "tx" { // the application's pool, on the replicas' database
		pcfg, err := pgxpool.ParseConfig(b.replicaURL)
		if err != nil {
			return fmt.Errorf("opening the application's pool: %w", err)
		}
		pcfg.MaxConns = appConns
		app, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return fmt.Errorf("opening the application's pool: %w", err)
		}
		defer app.Close()
		b.app = app
	}
	began := time.Now()
	leaves := b.leaves()
	// Cancelled with the first error of an execution, or to end the waits after a stall.
	ectx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	var inflight atomic.Int64
	// The latencies leave out the warm-up, while the pool opens its connections.
	warm := began.Add(min(benchWarmup, b.cfg.duration/2))
	run := func(rt *journey.Runtime) error {
		ex, t0, err := b.startOne(ectx, rt)
		if err != nil {
			return err
		}
		b.ids.add(ex.ID)
		b.started.Add(1)
		for _, leaf := range leaves {
			if _, err := rt.Get(ectx, ex.ID, leaf, journey.WaitAny()); err != nil {
				return fmt.Errorf("waiting for %s of %s: %w", leaf, ex.ID, err)
			}
		}
		if t0.Before(warm) {
			return nil
		}
		d := time.Since(t0)
		b.mu.Lock()
		b.latencies = append(b.latencies, d)
		b.mu.Unlock()
		return nil
	}

	interval := time.Duration(float64(time.Second) / b.cfg.rate)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := 0; time.Duration(i)*interval < b.cfg.duration && ectx.Err() == nil; i++ {
		timer.Reset(time.Until(began.Add(time.Duration(i) * interval)))
		select {
		case <-timer.C:
		case <-ectx.Done():
			continue
		}
		inflight.Add(1)
		wg.Add(1)
		go func() {
			defer func() {
				inflight.Add(-1)
				wg.Done()
				b.signal()
			}()
			if err := run(rts[i%len(rts)]); err != nil {
				cancel(err)
			}
		}()
	}
	res.backlogEnd = b.backlog()

	last, err := b.waitUntil(ectx, func() bool { return inflight.Load() == 0 })
	cancel(nil) // after a stall, ends the waits of the executions left
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if cause := context.Cause(ectx); err != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	res.elapsed, res.computations = last.Sub(began), b.finishedComputations()
	b.mu.Lock()
	defer b.mu.Unlock()
	slices.Sort(b.latencies)
	res.p50, res.p99 = percentile(b.latencies, 0.50), percentile(b.latencies, 0.99)
	return nil
}

// percentile returns the p-th percentile (0 < p ≤ 1) of sorted durations, by the nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// printProgress prints a line every benchProgressEvery until the function it returns is first
// called.
func (b *benchmark) printProgress(began time.Time) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ticker := time.NewTicker(benchProgressEvery)
		defer ticker.Stop()
		var prev int64
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				n := b.finishedComputations()
				fmt.Fprintf(b.env.stdout, "bench: [%s] computations=%d computations/s=%.1f executions=%d backlog=%d\n",
					time.Since(began).Round(time.Second), n, float64(n-prev)/benchProgressEvery.Seconds(),
					b.started.Load(), b.backlog())
				prev = n
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

// printRowWrites prints the row writes of each table that had some, per execution.
func (b *benchmark) printRowWrites(res benchResult) {
	if res.executions == 0 {
		return
	}
	per := func(n int64) float64 { return float64(n) / float64(res.executions) }
	var tables []string
	for _, table := range slices.Sorted(maps.Keys(res.rowWrites)) {
		if w := res.rowWrites[table]; per(w.total()) >= 0.005 { // what the setup wrote rounds to none
			tables = append(tables, fmt.Sprintf("%s %.2f inserted, %.2f updated (%.2f HOT), %.2f deleted",
				table, per(w.ins), per(w.upd), per(w.hot), per(w.del)))
		}
	}
	fmt.Fprintf(b.env.stdout, "bench: row writes per execution: %s\n", strings.Join(tables, "; "))
}

// printTopStatements prints the statements with the most calls, per computation.
func (b *benchmark) printTopStatements(res benchResult) {
	if len(res.topStatements) == 0 {
		return
	}
	fmt.Fprintf(b.env.stdout, "bench: the %d statements with the most calls: calls per computation, mean ms executing, "+
		"ms planning per call (0 unless pg_stat_statements.track_planning is on), statement\n", len(res.topStatements))
	for _, s := range res.topStatements {
		fmt.Fprintf(b.env.stdout, "bench:   %7.2f  %7.3f  %7.3f  %s\n",
			float64(s.calls)/float64(max(res.totalComputations, 1)), s.meanMs, s.planMs, s.query)
	}
}

// idList is a list of execution ids that goroutines add to.
type idList struct {
	mu  sync.Mutex
	ids []string
}

func (l *idList) add(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ids = append(l.ids, id)
}

func (l *idList) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ids)
}

// randomName returns prefix followed by 6 random hex digits.
func randomName(prefix string) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// withParam sets a parameter in a connection string: a URL or key=value pairs.
func withParam(conn, key, value string) string {
	u, err := url.Parse(conn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return conn + " " + key + "=" + value // the last of a repeated key wins
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// warmPool makes a replica's pool open all its connections when it starts, unless conn says how
// many: the open loop measures a warm replica. A cold one opens them under the load, each a new
// backend that prepares and plans every statement on its first use: at 250 executions/s, its p99
// was 126–587 ms, against 13–28 ms warm (three runs of each).
func warmPool(conn string) string {
	if strings.Contains(conn, "pool_min_conns") {
		return conn
	}
	maxConns := journey.DefaultMaxConns
	if cfg, err := pgxpool.ParseConfig(conn); err == nil && strings.Contains(conn, "pool_max_conns") {
		maxConns = int(cfg.MaxConns)
	}
	return withParam(conn, "pool_min_conns", strconv.Itoa(maxConns))
}
