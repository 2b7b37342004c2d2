//go:build linux

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/migrations"
	"github.com/journey-go/journey/persistence"
)

// defaults is a worker configuration for tests: short intervals, work of 1 to 2 seconds.
func defaults() workerConfig {
	return workerConfig{
		MaxWorkers: 100, StaleAfter: 2000, ReplicaHB: 250, Sweep: 500, Poll: 500,
		HBInterval: 500, HBTimeout: 10000, AbandonAfter: 60000,
		WorkMin: 1000, WorkMax: 2000, StopGrace: 200, IdleInTx: 2000, MaxAttempts: 5,
	}
}

// cluster is the test's view of the database that the worker processes share.
type cluster struct {
	cfg   workerConfig
	g     *graph.Graph
	store *persistence.Store
	// quiet keeps the workers' stderr out of the test log (it stays in worker.logs).
	quiet bool
}

func newCluster(t *testing.T, url string, cfg workerConfig) *cluster {
	t.Helper()
	c := unmigratedCluster(t, url, cfg)
	_, err := migrations.Migrate(context.Background(), c.store.DB(), c.cfg.Schema, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NoError(t, c.store.ReadLayout(t.Context()))
	return c
}

// unmigratedCluster is newCluster on a schema that the first worker migrates.
func unmigratedCluster(t *testing.T, url string, cfg workerConfig) *cluster {
	t.Helper()
	cfg.URL, cfg.Schema = url, pgtest.Schema(t)
	db := pgtest.BunDB(t, url)
	logger := slog.New(slog.DiscardHandler)
	graphs := served(cfg)
	c := &cluster{cfg: cfg, g: graphs[0]}
	var err error
	c.store, err = persistence.New(persistence.Config{
		DB: db, Schema: cfg.Schema, Graphs: graphs, Logger: logger,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			c.dump(t)
		}
	})
	return c
}

// dump logs what the database says, for a failed test: the attempts by state and replica, the
// replicas and the leases.
func (c *cluster) dump(t *testing.T) {
	t.Helper()
	for _, q := range []string{
		`SELECT state, replica_id, attempt, count(*), min(claimed_at), max(heartbeat_deadline) FROM ?.computations GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`,
		`SELECT replica_id, last_heartbeat, started_at, stale_after_ms, now() FROM ?.replica_heartbeats ORDER BY 1`,
		`SELECT name, holder, expires_at, now() FROM ?.leases`,
	} {
		if err := c.dumpQuery(t, strings.ReplaceAll(q, "?", pgx.Identifier{c.cfg.Schema}.Sanitize())); err != nil {
			t.Logf("dump: %v", err)
		}
	}
}

// dumpQuery logs the columns and the rows of one query of dump.
func (c *cluster) dumpQuery(t *testing.T, q string) error {
	t.Helper()
	rows, err := c.store.DB().QueryContext(context.Background(), q)
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return err
	}
	t.Logf("dump: %v", cols)
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		t.Logf("dump: %v", vals)
	}
	return rows.Err()
}

// worker is one replica process.
type worker struct {
	id     string
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string      // stdout
	at     []time.Time   // when each line of stdout was read
	logs   []string      // stderr: the runtime's warnings
	more   chan struct{} // signalled at each new line
	exited chan struct{}
}

// start starts a replica process and waits until it serves.
func (c *cluster) start(t *testing.T, id string) *worker {
	t.Helper()
	return c.startBinary(t, id, os.Args[0])
}

// startBinary starts a replica process of the test binary bin, and waits until it serves.
func (c *cluster) startBinary(t *testing.T, id, bin string) *worker {
	t.Helper()
	w := c.launch(t, id, bin)
	w.waitFor(t, "ready", func(w *worker) bool { return w.count("ready") > 0 })
	return w
}

// launch starts a replica process of the test binary bin.
func (c *cluster) launch(t *testing.T, id, bin string) *worker {
	t.Helper()
	cfg := c.cfg
	cfg.ReplicaID = id
	// The replica's sessions carry its id, for the tests' snapshots of pg_stat_activity.
	cfg.URL = withApplicationName(t, cfg.URL, id)
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	w := &worker{id: id, more: make(chan struct{}, 1), exited: make(chan struct{})}
	// The tests end their workers with signals, and Pdeathsig below ends them with the test: a
	// context would kill them before the test's cleanup stops them.
	w.cmd = exec.Command(bin, "-test.run=^$") //nolint:noctx // see above
	w.cmd.Env = append(os.Environ(), workerEnv+"="+string(raw))
	w.cmd.Stderr = &stderrWriter{t: t, w: w, quiet: c.quiet}
	// The worker dies with the test, whatever happens to the test.
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := w.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, w.cmd.Start())
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, sc.Text())
			w.at = append(w.at, time.Now())
			w.mu.Unlock()
			select {
			case w.more <- struct{}{}:
			default:
			}
		}
		_ = w.cmd.Wait()
		close(w.exited)
	}()
	t.Cleanup(func() {
		_ = w.cmd.Process.Signal(syscall.SIGCONT)
		_ = w.cmd.Process.Kill()
		<-w.exited
	})
	return w
}

// withApplicationName returns the database URL with its sessions named name in pg_stat_activity.
func withApplicationName(t *testing.T, dbURL, name string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// count counts the output lines that start with prefix.
func (w *worker) count(prefix string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// running is how many computations the worker has started and not finished.
func (w *worker) running() int { return w.count("started ") - w.count("finished ") }

// waitFor waits until cond holds, woken by each line the worker prints.
func (w *worker) waitFor(t *testing.T, what string, cond func(*worker) bool) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for !cond(w) {
		select {
		case <-w.more:
		case <-w.exited:
			if !cond(w) {
				t.Fatalf("worker %s exited before %s", w.id, what)
			}
		case <-timeout:
			t.Fatalf("worker %s: timed out waiting for %s", w.id, what)
		}
	}
}

func (w *worker) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(sig))
}

// stop stops the worker gracefully (SIGTERM) and waits for it to exit.
func (w *worker) stop(t *testing.T) {
	t.Helper()
	w.signal(t, syscall.SIGTERM)
	select {
	case <-w.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("worker %s did not stop", w.id)
	}
	require.Equal(t, 1, w.count("stopped"), "worker %s stopped gracefully", w.id)
}

// submit starts n executions and sets their input.
func (c *cluster) submit(t *testing.T, n int) []string {
	t.Helper()
	return c.submitting(n)(t)
}

// submitters is how many executions the test submits at once.
const submitters = 8

// submitting starts n executions and sets their input, in the background. The function it
// returns waits until they are all submitted, fails the test if any could not be, and returns
// their ids.
func (c *cluster) submitting(n int) func(t *testing.T) []string {
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	// As many submitters as a client's pool would have: a goroutine (and a new connection) for
	// each execution would fork hundreds of backends at once, and starve the replicas on 2 cores.
	slots := make(chan struct{}, submitters)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			ctx := context.Background()
			errs <- retry(func() error {
				e, err := c.store.CreateExecution(ctx, c.g)
				if err == nil {
					ids[i] = e.ID
				}
				return err
			})
			errs <- retry(func() error {
				_, err := c.store.SetValues(ctx, ids[i], map[string]json.RawMessage{"n": json.RawMessage(fmt.Sprint(i))}, nil, nil)
				return err
			})
		}()
	}
	return func(t *testing.T) []string {
		t.Helper()
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		return ids
	}
}

// retry retries fn until it succeeds, for up to 30s: through a PostgreSQL restart, and the
// broken connections it leaves in the pool.
func retry(fn func() error) error { return retryFor(30*time.Second, fn) }

// retryFor calls fn until it succeeds or timeout has passed, and returns its last error.
func retryFor(timeout time.Duration, fn func() error) error {
	var err error
	pgtest.Poll(timeout, 100*time.Millisecond, func() bool { err = fn(); return err == nil })
	return err
}

// waitDone polls the database until n computations succeeded and none is active. The database,
// not a process, is the judge of completion; a poll is the only signal it gives the test.
func (c *cluster) waitDone(t *testing.T, n int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var counts map[string]int
	var err error
	if !pgtest.Poll(timeout, 100*time.Millisecond, func() bool {
		counts, err = c.store.StateCounts(context.Background())
		return err == nil && counts[persistence.StateSuccess] >= n &&
			counts[persistence.StatePending]+counts[persistence.StateAvailable]+counts[persistence.StateRunning] == 0
	}) {
		t.Fatalf("after %v, the computations are %v (error %v); want %d successes and nothing active", timeout, counts, err, n)
	}
	return time.Since(start)
}

// audit checks that every execution ended with exactly one successful attempt and its value,
// and returns all attempts.
func (c *cluster) audit(t *testing.T, ids []string) []persistence.Computation {
	t.Helper()
	var all []persistence.Computation
	for _, id := range ids {
		comps, err := c.store.Computations(context.Background(), id)
		require.NoError(t, err)
		successes := 0
		for _, comp := range comps {
			if comp.Error != nil && strings.HasPrefix(*comp.Error, "released: replica ") {
				// A claim handed back at a Stop: in the history, with its claim's time, and no run.
				require.Equal(t, persistence.StateCanceled, comp.State, "execution %s: a released claim", id)
				require.NotNil(t, comp.ClaimedAt, "execution %s: a released claim keeps its time", id)
				continue
			}
			if comp.State == persistence.StateSuccess {
				successes++
			}
			require.NotContains(t, []string{persistence.StateRunning, persistence.StateAvailable, persistence.StatePending}, comp.State,
				"execution %s is stuck", id)
		}
		require.Equal(t, 1, successes, "execution %s: exactly one completion, never two", id)
		vals, err := c.store.Values(context.Background(), id)
		require.NoError(t, err)
		require.True(t, vals.Has("work"), "execution %s has its value", id)
		for _, comp := range comps {
			if comp.Error == nil || !strings.HasPrefix(*comp.Error, "released: replica ") {
				all = append(all, comp)
			}
		}
	}
	return all
}

// valueOf reads the result of an execution.
func (c *cluster) valueOf(t *testing.T, id string) result {
	t.Helper()
	vals, err := c.store.Values(context.Background(), id)
	require.NoError(t, err)
	var r result
	require.NoError(t, vals.Decode("work", &r))
	return r
}

// stderrWriter keeps a worker's stderr (its warnings) and, unless quiet, copies it into the
// test log.
type stderrWriter struct {
	t     *testing.T
	w     *worker
	quiet bool
}

func (p *stderrWriter) Write(b []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		p.w.mu.Lock()
		p.w.logs = append(p.w.logs, line)
		p.w.mu.Unlock()
		if !p.quiet {
			p.t.Logf("[%s] %s", p.w.id, line)
		}
	}
	return len(b), nil
}

// q puts the quoted schema of the cluster in the place of each "?." of query.
func (c *cluster) q(query string) string {
	return strings.ReplaceAll(query, "?.", pgx.Identifier{c.cfg.Schema}.Sanitize()+".")
}
