//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/actors"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
)

const executions = 300

func TestSIGKILLedReplicaLosesNothing(t *testing.T) {
	c := newCluster(t, pgtest.URL(t), defaults())
	killOneLosesNothing(t, c, []*worker{c.start(t, "w0"), c.start(t, "w1"), c.start(t, "w2")})
}

// Two replicas behind PgBouncer in transaction mode, with a direct connection for LISTEN: the
// migrations, the submissions and the audit go through the pooler too.
func TestSIGKILLedReplicaBehindAPoolerLosesNothing(t *testing.T) {
	for _, pooler := range pgtest.Poolers {
		t.Run(pooler.Name, func(t *testing.T) {
			cfg := defaults()
			cfg.ListenURL = pgtest.URL(t)
			c := newCluster(t, pooler.Start(t), cfg)
			killOneLosesNothing(t, c, []*worker{c.start(t, "w0"), c.start(t, "w1")})
		})
	}
}

// killOneLosesNothing runs executions on the workers, first without a kill, then with a SIGKILL
// of workers[0] while it holds running computations, and audits both: nothing lost, nothing run
// twice at once, and the killed replica's work reclaimed by its staleness.
func killOneLosesNothing(t *testing.T, c *cluster, workers []*worker) {
	t.Helper()
	// A baseline without a kill.
	start := time.Now()
	ids := c.submit(t, executions)
	c.waitDone(t, executions, 2*time.Minute)
	c.audit(t, ids)
	t.Logf("%d executions without a kill: %v from submission to the last completion", executions, time.Since(start).Round(time.Millisecond))

	// The kill comes while the executions are being submitted, once the victim holds some.
	start = time.Now()
	submitted := c.submitting(executions)
	victim := workers[0]
	victim.waitFor(t, "running computations", func(w *worker) bool { return w.running() >= 10 })
	held := victim.running()
	victim.signal(t, syscall.SIGKILL)
	killedAt := time.Now()
	more := submitted(t)
	c.waitDone(t, 2*executions, 2*time.Minute)
	t.Logf("%d executions with a kill of a replica holding %d of them: %v from submission to the last completion",
		executions, held, time.Since(start).Round(time.Millisecond))

	var abandoned int
	var firstReclaim time.Time
	for _, comp := range c.audit(t, append(ids, more...)) {
		if comp.State == persistence.StateAbandoned {
			abandoned++
			// A replica starved on a loaded machine may miss its own stale-after too, or the
			// heartbeat deadlines of its claims (the race-built replicas of this test can stall
			// for seconds on 2 cores): its work is abandoned for not heartbeating, and fenced like
			// the killed one's. Never for anything else.
			require.Contains(t, []string{persistence.ReasonReplica(*comp.ReplicaID), persistence.ReasonHeartbeat}, *comp.Error,
				"every abandoned attempt was abandoned because it stopped heartbeating")
		}
		if comp.Attempt > 1 && comp.ClaimedAt != nil && (firstReclaim.IsZero() || comp.ClaimedAt.Before(firstReclaim)) {
			firstReclaim = *comp.ClaimedAt
			require.NotEqual(t, "w0", *comp.ReplicaID)
		}
	}
	require.Positive(t, abandoned, "the killed replica held running work")
	detection := firstReclaim.Sub(killedAt)
	t.Logf("detection: kill → first reclaimed computation running elsewhere: %v (ReplicaStaleAfter 2s, SweepInterval 500ms); %d attempts abandoned",
		detection.Round(time.Millisecond), abandoned)
	// The promise: the replica's staleness gives its work away, well before the claims' own
	// heartbeat deadlines would. Nominally StaleAfter plus a sweep (about 2.1s here).
	require.Less(t, detection, ms(c.cfg.HBTimeout), "detected by the replica's staleness, not by the claims' heartbeat deadlines")
}

// frozen starts replica "frozen" alone with work, SIGSTOPs it while it holds running
// computations, then starts replica "rescuer". The replica heartbeat cannot fire first: it is
// stale only after 60s, while the computations' heartbeat timeout is 1s.
func frozen(t *testing.T) (*cluster, *worker, []string) {
	t.Helper()
	cfg := defaults()
	cfg.StaleAfter, cfg.HBInterval, cfg.HBTimeout, cfg.Sweep = 60000, 200, 1000, 200
	cfg.WorkMin, cfg.WorkMax = 3000, 3000
	c := newCluster(t, pgtest.URL(t), cfg)
	w := c.start(t, "frozen")
	ids := c.submit(t, 10)
	w.waitFor(t, "all ten running", func(w *worker) bool { return w.count("started ") == 10 })
	w.signal(t, syscall.SIGSTOP)
	c.start(t, "rescuer")
	c.waitDone(t, 10, time.Minute)
	return c, w, ids
}

func TestFrozenProcessIsReclaimedByHeartbeatDeadline(t *testing.T) {
	c, _, ids := frozen(t)
	for _, comp := range c.audit(t, ids) {
		if comp.State != persistence.StateAbandoned {
			require.Equal(t, "rescuer", *comp.ReplicaID)
			continue
		}
		require.Equal(t, "frozen", *comp.ReplicaID)
		require.Equal(t, persistence.ReasonHeartbeat, *comp.Error, "the heartbeat deadline fired, not the replica's or AbandonAfter")
		require.Less(t, comp.FinishedAt.Sub(*comp.ClaimedAt), 10*time.Second, "reclaimed after the heartbeat timeout, long before AbandonAfter (60s)")
	}
}

func TestLateResultAfterReclaimIsDropped(t *testing.T) {
	c, w, ids := frozen(t)
	w.signal(t, syscall.SIGCONT)
	// Its claims are gone: it cancels its work and writes nothing.
	w.waitFor(t, "every computation to finish", func(w *worker) bool { return w.count("finished ") == 10 })
	w.mu.Lock()
	t.Logf("the frozen replica said: %q", w.lines)
	w.mu.Unlock()
	require.Equal(t, 10, countOutcome(w, actors.OutcomeDropped), "every late result is dropped")
	for _, id := range ids {
		require.Equal(t, "rescuer", c.valueOf(t, id).Replica, "the reclaimed attempt's value is the one kept")
	}
	c.audit(t, ids)
}

func countOutcome(w *worker, outcome string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.lines {
		if strings.HasPrefix(l, "finished ") && strings.HasSuffix(l, outcome) {
			n++
		}
	}
	return n
}

// (m) A replica that freezes in the middle of a sweep (SIGSTOP, a long GC pause, a VM migration)
// keeps nothing that others need: its sweep lease runs out, PostgreSQL ends its transaction after
// IdleInTransactionTimeout and frees what it held, and another replica rescues the work.
func TestReplicaFrozenMidSweepHoldsNothing(t *testing.T) {
	cfg := defaults()
	cfg.Sweep, cfg.WorkMin, cfg.WorkMax = 200, 3000, 3000
	c := newCluster(t, pgtest.URL(t), cfg)
	victim := c.start(t, "victim")
	ids := c.submit(t, 10)
	victim.waitFor(t, "all ten running", func(w *worker) bool { return w.count("started ") == 10 })

	c.cfg.FreezeInSweep = true
	freezer := c.start(t, "freezer")
	c.cfg.FreezeInSweep = false
	victim.signal(t, syscall.SIGKILL)
	// Once the victim's lease has run out, the freezer sweeps, and stops itself mid-abandonment,
	// holding the sweep lease, a computation's row and its execution's lock.
	freezer.waitFor(t, "the freezer to freeze mid-sweep", func(w *worker) bool { return w.count("freezing ") > 0 })
	frozenAt := time.Now()
	c.start(t, "rescuer")
	c.waitDone(t, 10, time.Minute)
	t.Logf("10 executions rescued %v after a replica froze mid-sweep (idle-in-transaction timeout %v, lease %v)",
		time.Since(frozenAt).Round(time.Millisecond), ms(cfg.IdleInTx), 3*ms(cfg.Sweep))
	for _, comp := range c.audit(t, ids) {
		switch {
		case comp.State != persistence.StateAbandoned:
			require.Equal(t, "rescuer", *comp.ReplicaID)
		case *comp.ReplicaID == "freezer":
			// A retry of the victim's work that the freezer claimed before it froze (its
			// dispatcher runs beside its sweeper) is the freezer's, and is abandoned for the
			// freezer's own silence.
			require.Equal(t, persistence.ReasonReplica("freezer"), *comp.Error)
		default:
			require.Equal(t, "victim", *comp.ReplicaID, "only the dead replicas' work was abandoned")
		}
	}

	// Woken up, the freezer finds its transaction gone, and goes on without writing anything twice.
	freezer.signal(t, syscall.SIGCONT)
	freezer.stop(t)
	c.audit(t, ids)
}

func TestRollingRestartConsumesNoAttempt(t *testing.T) {
	cfg := defaults()
	cfg.MaxWorkers = 20
	c := newCluster(t, pgtest.URL(t), cfg)
	workers := []*worker{c.start(t, "r0"), c.start(t, "r1"), c.start(t, "r2")}
	start := time.Now()
	var ids []string
	// Each replica is stopped while it holds work: a batch is submitted before each stop.
	for i, w := range workers {
		submitted := c.submitting(executions / 3)
		w.waitFor(t, "running computations", func(w *worker) bool { return w.running() > 0 })
		w.stop(t)
		workers[i] = c.start(t, fmt.Sprintf("r%d-restarted", i))
		ids = append(ids, submitted(t)...)
	}
	c.waitDone(t, executions, 2*time.Minute)
	t.Logf("%d executions through a rolling restart of 3 replicas: %v", executions, time.Since(start).Round(time.Millisecond))
	for _, comp := range c.audit(t, ids) {
		require.Equal(t, persistence.StateSuccess, comp.State, "no attempt failed or was abandoned")
		require.Equal(t, 1, comp.Attempt, "no attempt was consumed by the restarts")
	}
}

// Stop with a deadline cancels first, and releases only the attempts whose function has
// returned: a function deaf to its context is never run by another replica at the same time,
// and finishes once, on the other replica, without consuming an attempt.
func TestStopNeverRunsAnAttemptTwiceAtOnce(t *testing.T) {
	cfg := defaults()
	cfg.WorkMin, cfg.WorkMax, cfg.StopGrace, cfg.Stubborn = 2000, 2000, 100, true
	c := newCluster(t, pgtest.URL(t), cfg)
	first := c.start(t, "first")
	ids := c.submit(t, 3)
	first.waitFor(t, "all three running", func(w *worker) bool { return w.count("began ") == 3 })
	second := c.start(t, "second")
	first.stop(t) // Stop with a 100ms ctx, two seconds before the functions return
	c.waitDone(t, 3, time.Minute)

	require.Equal(t, 3, countOutcome(first, actors.OutcomeReleased), "each attempt is released once its function returned")
	before, after := runs(t, first), runs(t, second)
	require.Len(t, before, 3)
	require.Len(t, after, 3, "the second replica ran each attempt once")
	for n, r := range before {
		o := after[n]
		require.True(t, o.began.After(r.returned),
			"input %d: the second replica began at %v, before the first's function returned at %v", n, o.began, r.returned)
	}
	for _, comp := range c.audit(t, ids) {
		require.Equal(t, persistence.StateSuccess, comp.State)
		require.Equal(t, 1, comp.Attempt, "the release consumed no attempt")
		require.Equal(t, "second", *comp.ReplicaID)
	}
}

// run is when a worker's stubborn function began and returned.
type run struct{ began, returned time.Time }

// runs reads the runs of a stubborn worker's functions by input, from its lines; an input run
// twice fails the test.
func runs(t *testing.T, w *worker) map[int64]run {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[int64]run{}
	for _, l := range w.lines {
		var what string
		var n, at int64
		if _, err := fmt.Sscanf(l, "%s %d %d", &what, &n, &at); err != nil || (what != "began" && what != "returned") {
			continue
		}
		r := out[n]
		switch {
		case what == "began" && r.began.IsZero():
			r.began = time.Unix(0, at)
		case what == "returned" && r.returned.IsZero():
			r.returned = time.Unix(0, at)
		default:
			t.Fatalf("worker %s ran input %d twice: %q", w.id, n, l)
		}
		out[n] = r
	}
	return out
}

func TestPostgresRestartLeavesNothingStuck(t *testing.T) {
	pg := pgtest.Cluster(t)
	cfg := defaults()
	cfg.StaleAfter, cfg.HBTimeout = 8000, 8000
	c := newCluster(t, pg.URL(), cfg)
	w0 := c.start(t, "p0")
	c.start(t, "p1")
	submitted := c.submitting(100)
	w0.waitFor(t, "running computations", func(w *worker) bool { return w.running() > 0 })
	ids := submitted(t)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, pg.Restart(ctx))
	more := c.submit(t, 100)
	took := c.waitDone(t, 200, 2*time.Minute)
	t.Logf("200 executions across a PostgreSQL restart: done %v after it", took.Round(time.Millisecond))
	c.audit(t, append(ids, more...))
}

func TestCrashBetweenClaimAndDeliveryLosesNoNotification(t *testing.T) {
	cfg := defaults()
	cfg.BlockingHandler = true
	c := newCluster(t, pgtest.URL(t), cfg)
	w := c.start(t, "notifier")
	ids := c.submit(t, 1)
	_, err := c.store.SetValues(context.Background(), ids[0], map[string]json.RawMessage{"n": json.RawMessage("-1")}, nil, nil)
	require.NoError(t, err)

	// The worker claimed the failure and entered its handler; it dies before marking the delivery.
	w.waitFor(t, "the handler to be called", func(w *worker) bool { return w.count("handling ") > 0 })
	w.signal(t, syscall.SIGKILL)
	key := strings.TrimPrefix(lineWith(w, "handling "), "handling ")

	got := make(chan journey.ExecutionEvent, 10)
	rt, err := journey.New(context.Background(), journey.Config{
		DatabaseURL: c.cfg.URL, Schema: c.cfg.Schema, ReplicaID: "survivor",
		Graphs: []*graph.Graph{c.g}, PollInterval: 100 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
		OnExecutionFailed: func(ctx context.Context, e journey.ExecutionEvent) error {
			got <- e
			return nil
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Stop(context.Background())) })
	select {
	case e := <-got:
		require.Equal(t, key, e.IdempotencyKey, "the same idempotency key at every delivery")
		require.Equal(t, ids[0], e.ExecutionID)
	case <-time.After(30 * time.Second):
		t.Fatal("the other replica never delivered the event")
	}
	ns, err := rt.Notifications(context.Background(), ids[0])
	require.NoError(t, err)
	require.Len(t, ns, 1, "one claim")
	require.Len(t, ns[0].Deliveries, 1)
}

func lineWith(w *worker, prefix string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.lines {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
