//go:build linux

package chaos

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/journey-go/journey/devpg"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
)

// The soak's knobs, read from the environment.
const (
	// envSoakDuration is how long the soak produces executions and disrupts the replicas, as a
	// Go duration. Default 60s; `make soak` sets 10m.
	envSoakDuration = "JOURNEY_SOAK_DURATION"
	// envSoakRate is how many executions the soak starts per second. Default 10; `make soak`
	// sets 20.
	envSoakRate = "JOURNEY_SOAK_RATE"
	// envSoakSeed seeds the choice of the replicas to kill and to freeze. Default: the clock.
	envSoakSeed = "JOURNEY_SOAK_SEED"
)

const (
	// soakKillEvery is the time between two SIGKILLs of a replica.
	soakKillEvery = 20 * time.Second
	// soakReplicas is how many replica processes run at once.
	soakReplicas = 3
	// soakShown caps the rows and executions printed for each kind of problem.
	soakShown = 10
)

// TestSoak runs three replica processes for JOURNEY_SOAK_DURATION (default 60s) under a steady
// stream of executions (JOURNEY_SOAK_RATE a second, default 10) of the soak graphs: a chain, a
// fan-out and join, a gated node, a recurring tick, a map whose children charge its lines, and a
// rate-limited node (see soakKinds). One execution in ten of the graphs that can fail fails for
// good, by design; of the others, one in ten is canceled at once, one paused and resumed, one
// archived and unarchived (see soakOp). Meanwhile it SIGKILLs a random replica every 20s and
// starts a new one in its place, freezes one replica (SIGSTOP, then SIGCONT) for longer than the
// heartbeat timeout, and restarts PostgreSQL once. Then it stops producing, waits until nothing is
// left to do, and audits the database. It prints one line,
//
//	soak: executions=N kills=K max_detect_s=X lost=0 doubled=0 stuck=0 broken=0
//
// and fails if lost, doubled, stuck or broken (the state machine's invariants: see
// auditInvariants) is not zero, if the producer could not start an execution, or if a handler
// was called twice for an event with no kill or restart to explain it. It logs the evidence of
// each problem: the rows, their replicas and errors, and what the replicas logged about them.
//
// It runs alone (no t.Parallel): its figures are timings under a known load.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak takes a minute or more; -short skips it")
	}
	plan := soakPlanFromEnv(t)
	if deadline, ok := t.Deadline(); ok && time.Until(deadline) < plan.duration+plan.drain+time.Minute {
		t.Fatalf("the soak needs about %v, and the test binary's -timeout leaves %v: raise -timeout or lower %s",
			plan.duration+plan.drain+time.Minute, time.Until(deadline).Round(time.Second), envSoakDuration)
	}
	began := time.Now()
	pg := pgtest.Cluster(t)
	cfg := defaults()
	cfg.Soak = true
	cfg.WorkMin, cfg.WorkMax = 100, 400
	cfg.HBInterval, cfg.HBTimeout = 500, 2000
	c := newCluster(t, withApplicationName(t, pg.URL(), "producer"), cfg)
	c.quiet = true
	c.store.DB().SetMaxOpenConns(16)
	s := &soak{
		c: c, plan: plan, kinds: soakKinds(cfg), rng: rand.New(rand.NewPCG(plan.seed, 0)), drained: make(chan struct{}),
		// The audit's own connections: the producer's may all be waiting for a lock.
		db: pgtest.BunDB(t, withApplicationName(t, pg.URL(), "audit")),
	}
	for range soakReplicas {
		s.workers = append(s.workers, s.newWorker(t))
	}
	t.Logf("soak plan: %v at %g executions/s, a SIGKILL every %v, seed %d (%s=%d to replay); PostgreSQL and %d replicas ready in %v",
		plan.duration, plan.rate, soakKillEvery, plan.seed, envSoakSeed, plan.seed, soakReplicas, time.Since(began).Round(time.Millisecond))

	s.start = time.Now()
	stop := s.produce()
	s.disrupt(t, pg)
	stop()
	t.Logf("produced %d executions in %v", len(s.produced), time.Since(s.start).Round(time.Millisecond))
	if !s.drain(t) {
		s.logDatabaseState(t, "after the drain") // before the kills below end the sessions
	}
	close(s.drained)
	s.watchers.Wait()
	// Nothing may change under the audit: the database and the workers' output are final.
	for _, w := range s.workers {
		w.signal(t, syscall.SIGKILL)
		<-w.exited
	}
	r := s.audit(t)
	s.saveOutputs(t)

	fmt.Printf("soak: executions=%d kills=%d max_detect_s=%.1f lost=%d doubled=%d stuck=%d broken=%d\n",
		len(s.produced), len(s.kills), r.maxDetect.Seconds(), r.lost, r.doubled, r.stuck, r.broken)
	for _, err := range s.prodErrs {
		t.Errorf("producer: %v", err)
	}
	if r.lost+r.doubled+r.stuck+r.broken > 0 {
		t.Errorf("lost=%d doubled=%d stuck=%d broken=%d: see the log above for the executions and rows", r.lost, r.doubled, r.stuck, r.broken)
	}
}

// soakPlan is what a soak run does.
type soakPlan struct {
	duration  time.Duration // how long executions are produced
	rate      float64       // executions started per second
	seed      uint64        // picks the victims
	freezeFor time.Duration // how long a replica is SIGSTOPped
	drain     time.Duration // how long the work left at the end may take at most
}

func soakPlanFromEnv(t *testing.T) soakPlan {
	t.Helper()
	p := soakPlan{duration: time.Minute, rate: 10, seed: uint64(time.Now().UnixNano())}
	var err error
	if v := os.Getenv(envSoakDuration); v != "" {
		p.duration, err = time.ParseDuration(v)
		require.NoError(t, err, "%s must be a Go duration such as 10m", envSoakDuration)
	}
	if v := os.Getenv(envSoakRate); v != "" {
		p.rate, err = strconv.ParseFloat(v, 64)
		require.NoError(t, err, "%s must be a number of executions per second", envSoakRate)
	}
	if v := os.Getenv(envSoakSeed); v != "" {
		p.seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "%s must be an unsigned integer", envSoakSeed)
	}
	require.True(t, p.duration > 0 && p.rate > 0, "%s and %s must be positive", envSoakDuration, envSoakRate)
	// Longer than both the heartbeat timeout and ReplicaStaleAfter of the workers (2s).
	p.freezeFor = 5 * time.Second
	p.drain = 30*time.Second + p.duration/2
	return p
}

// soak is the state of a soak run.
type soak struct {
	c     *cluster
	db    *bun.DB // for query
	plan  soakPlan
	kinds []soakKind
	rng   *rand.Rand
	start time.Time

	workers []*worker // the live replicas
	all     []*worker // every replica started, the killed ones too
	kills   []kill
	freeze  outage // the SIGSTOP
	restart outage // PostgreSQL's restart

	watchers sync.WaitGroup // see watch
	drained  chan struct{}  // closed after the drain

	mu       sync.Mutex // guards produced and prodErrs, written by the producer
	produced []produced
	prodErrs []error
}

// kill is a SIGKILL of a replica.
type kill struct {
	replica string
	at      time.Time
}

// outage is a time a replica was frozen, or PostgreSQL down.
type outage struct {
	replica  string
	from, to time.Time
	happened bool
}

// produced is an execution the producer started.
type produced struct {
	id   string
	kind int // index in soak.kinds
	n    int64
	// op is what the producer did to it once started, "" for nothing (see soakOp); from when (its
	// cancel or pause had committed, with its cascade to the children) to when (the resume was
	// sent; the end of the soak, for a cancel) nothing of it may start.
	op            string
	held, release time.Time
}

// The lifecycle operations of the soak, in the rounds of executions that fail nowhere by design:
// one in ten is canceled right after its start, one paused and resumed soakPauseFor later, one
// archived and unarchived soakArchiveFor later.
const (
	soakCancel     = "cancel"
	soakPause      = "pause"
	soakArchive    = "archive"
	soakPauseFor   = 500 * time.Millisecond
	soakArchiveFor = 300 * time.Millisecond
)

// soakOp is the operation of the execution of kind k started i-th, with input n. A map's parent
// is not archived: its children would end archived, and the map, which collects no failures,
// would fail.
func soakOp(i int, kinds []soakKind, n int64) string {
	k := kinds[i%len(kinds)]
	if n < 0 || (i/len(kinds))%10 == 9 && k.child != nil {
		return ""
	}
	switch (i / len(kinds)) % 10 {
	case 5:
		return soakCancel
	case 7:
		return soakPause
	case 9:
		return soakArchive
	}
	return ""
}

// rel shows a time as its offset from the start of the soak, to line it up with the kills.
func (s *soak) rel(tm *time.Time) string {
	if tm == nil {
		return "-"
	}
	return fmt.Sprintf("t+%.1fs", tm.Sub(s.start).Seconds())
}

// newWorker starts a replica process with a new id: a restarted replica is a new replica, so
// that the work of the killed one is told apart from its own.
func (s *soak) newWorker(t *testing.T) *worker {
	t.Helper()
	w := s.c.start(t, fmt.Sprintf("s%d", len(s.all)))
	s.all = append(s.all, w)
	return w
}

// produce starts executions at the plan's rate, each in a goroutine of its own, until stop is
// called; stop waits for the executions under way to be started.
func (s *soak) produce() (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Duration(float64(time.Second) / s.plan.rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.startOne(i)
			}()
		}
	}()
	return func() {
		close(quit)
		<-done
		wg.Wait()
	}
}

// produceRetry calls fn, a step of the producer, until it succeeds or two minutes have passed.
// The producer offers more than two cores under -race take: its calls queue for the store's
// connections, and one that the PostgreSQL restart fails may come after 30 s of queueing.
func produceRetry(fn func() error) error { return retryFor(2*time.Minute, fn) }

// startOne starts the i-th execution: of graph i mod 4, with input i, or -i for the one round
// of four in ten whose graph can fail by design.
func (s *soak) startOne(i int) {
	k := i % len(s.kinds)
	n := int64(i)
	if (i/len(s.kinds))%10 == 3 && s.kinds[k].failsAt != "" {
		n = -n
	}
	ctx := context.Background()
	var id string
	err := produceRetry(func() error {
		e, err := s.c.store.CreateExecution(ctx, s.kinds[k].g)
		if err == nil {
			id = e.ID
		}
		return err
	})
	if err == nil {
		err = produceRetry(func() error {
			_, err := s.c.store.SetValues(ctx, id, map[string]json.RawMessage{"n": json.RawMessage(strconv.FormatInt(n, 10))}, nil, nil)
			return err
		})
	}
	p := produced{id: id, kind: k, n: n, op: soakOp(i, s.kinds, n)}
	if err == nil {
		err = s.operate(ctx, &p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.prodErrs = append(s.prodErrs, fmt.Errorf("starting execution %d (%s, id %q, n=%d, %s): %w", i, s.kinds[k].g.Name(), id, n, p.op, err))
		return
	}
	s.produced = append(s.produced, p)
}

// operate does p's lifecycle operation, through the store as the CLI and the dashboard's requests
// do: a parent's cancel, pause and archive reach its children once it has committed.
func (s *soak) operate(ctx context.Context, p *produced) error {
	switch p.op {
	case soakCancel:
		err := produceRetry(func() error { return s.c.store.Cancel(ctx, p.id, "soak") })
		p.held, p.release = time.Now(), time.Now().Add(24*time.Hour)
		return err
	case soakPause:
		if err := produceRetry(func() error { return s.c.store.SetPaused(ctx, p.id, true) }); err != nil {
			return err
		}
		p.held = time.Now()
		time.Sleep(soakPauseFor) // the length of the pause: the soak's input
		p.release = time.Now()
		return produceRetry(func() error { return s.c.store.SetPaused(ctx, p.id, false) })
	case soakArchive:
		if err := produceRetry(func() error { return s.c.store.SetArchived(ctx, p.id, true) }); err != nil {
			return err
		}
		time.Sleep(soakArchiveFor) // the length of the archive: the soak's input
		return produceRetry(func() error { return s.c.store.SetArchived(ctx, p.id, false) })
	}
	return nil
}

// disrupt runs the plan's disruptions on schedule until its duration has passed: a SIGKILL
// every soakKillEvery, a freeze half-way to the first kill, and a PostgreSQL restart half-way
// between two kills near the middle of the run, so that each disruption is over before the next
// one. The schedule is wall-clock time: the disruptions are the test's input, not something it
// waits for.
func (s *soak) disrupt(t *testing.T, pg *devpg.Cluster) {
	t.Helper()
	type event struct {
		at time.Duration
		do func()
	}
	var events []event
	for at := soakKillEvery; at < s.plan.duration; at += soakKillEvery {
		events = append(events, event{at, func() { s.kill(t) }})
	}
	freezeAt := soakKillEvery / 2
	restartAt := time.Duration(s.plan.duration/(2*soakKillEvery))*soakKillEvery + soakKillEvery/2
	if restartAt == freezeAt {
		restartAt += soakKillEvery
	}
	events = append(events, event{freezeAt, func() { s.freezeOne(t) }}, event{restartAt, func() { s.restartPostgres(t, pg) }})
	slices.SortFunc(events, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	for _, e := range events {
		if e.at >= s.plan.duration {
			continue
		}
		time.Sleep(time.Until(s.start.Add(e.at)))
		e.do()
	}
	time.Sleep(time.Until(s.start.Add(s.plan.duration)))
	if !s.freeze.happened || !s.restart.happened {
		t.Logf("the soak was too short for the freeze (at %v) or the PostgreSQL restart (at %v)", freezeAt, restartAt)
	}
}

// kill SIGKILLs a random replica and starts a new one in its place.
func (s *soak) kill(t *testing.T) {
	t.Helper()
	i := s.rng.IntN(len(s.workers))
	v := s.workers[i]
	v.signal(t, syscall.SIGKILL)
	s.kills = append(s.kills, kill{replica: v.id, at: time.Now()})
	s.watch(t, fmt.Sprintf("kill %d", len(s.kills)), v.id, s.kills[len(s.kills)-1].at)
	<-v.exited
	s.workers[i] = s.newWorker(t)
}

// freezeOne SIGSTOPs a random replica for the plan's freezeFor, then lets it go on. The sleep is
// the length of the fault itself.
func (s *soak) freezeOne(t *testing.T) {
	t.Helper()
	v := s.workers[s.rng.IntN(len(s.workers))]
	v.signal(t, syscall.SIGSTOP)
	from := time.Now()
	s.watch(t, "freeze", v.id, from)
	time.Sleep(s.plan.freezeFor)
	v.signal(t, syscall.SIGCONT)
	s.freeze = outage{replica: v.id, from: from, to: time.Now(), happened: true}
}

// restartPostgres restarts the soak's PostgreSQL: a fast shutdown, which ends every connection.
func (s *soak) restartPostgres(t *testing.T, pg *devpg.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	from := time.Now()
	require.NoError(t, pg.Restart(ctx))
	s.restart = outage{from: from, to: time.Now(), happened: true}
}

// query runs a query on the soak's schema ({s} in it) and scans its rows into dst. No rows is
// no error.
func (s *soak) query(dst any, query string, args ...any) error {
	query = strings.ReplaceAll(query, "{s}", pgx.Identifier{s.c.cfg.Schema}.Sanitize())
	err := s.db.NewRaw(query, args...).Scan(context.Background(), dst)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}

func (s *soak) mustQuery(t *testing.T, dst any, query string, args ...any) {
	t.Helper()
	require.NoError(t, retry(func() error { return s.query(dst, query, args...) }))
}

// leftover counts what is left to do.
type leftover struct {
	Computations int `bun:"computations"` // PENDING, AVAILABLE or RUNNING
	Ticks        int `bun:"ticks"`        // executions waiting for a tick to come due
	Deliveries   int `bun:"deliveries"`   // notifications not yet delivered
}

// soakDrainStall: the drain gives up when what is left to do has not shrunk for that long. A
// backlog (the replicas fell behind the producer) keeps shrinking; stuck rows do not.
const soakDrainStall = 20 * time.Second

// drain waits, after the producer stopped, until nothing is left to do, and reports whether that
// happened. It gives up when what is left stops shrinking for soakDrainStall, or after the plan's
// drain time. It polls: the database gives the test no other signal.
func (s *soak) drain(t *testing.T) bool {
	t.Helper()
	start := time.Now()
	least, progress := -1, start // the least left so far, and when it was reached
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for ; ; <-tick.C {
		var left leftover
		err := s.query(&left, `SELECT
			(SELECT count(*) FROM {s}.computations WHERE state IN ('PENDING', 'AVAILABLE', 'RUNNING', 'PAUSED', 'WAITING')) AS computations,
			(SELECT count(*) FROM {s}.executions WHERE wake_at IS NOT NULL AND archived_at IS NULL) AS ticks,
			(SELECT count(*) FROM {s}.notification_deliveries WHERE state = 'PENDING') AS deliveries`)
		if err == nil && left == (leftover{}) {
			t.Logf("drain: nothing left to do %v after the producer stopped", time.Since(start).Round(time.Millisecond))
			return true
		}
		if n := left.Computations + left.Ticks + left.Deliveries; err == nil && (least < 0 || n < least) {
			least, progress = n, time.Now()
		}
		if time.Since(progress) > soakDrainStall || time.Since(start) > s.plan.drain {
			t.Logf("drain: after %v, %v of it without progress, still left: %d active computations, %d waiting ticks, %d pending deliveries (error: %v)",
				time.Since(start).Round(time.Second), time.Since(progress).Round(time.Second), left.Computations, left.Ticks, left.Deliveries, err)
			return false
		}
	}
}

// soakReport is the audit's verdict.
type soakReport struct {
	lost, doubled, stuck, broken int
	maxDetect                    time.Duration
}

// audit checks the database after the drain, logs the evidence of every problem, and returns
// the counts of the summary line.
func (s *soak) audit(t *testing.T) soakReport {
	t.Helper()
	s.logReplicaLogs(t)
	var r soakReport
	r.stuck = s.auditStuck(t)
	r.doubled = s.auditDoubles(t)
	claims := s.claims(t)
	r.lost = s.auditOutcomes(t, claims)
	r.broken = s.auditInvariants(t)
	s.auditHandlers(t, claims)
	r.maxDetect = s.detection(t)
	s.logQueueing(t)
	if s.freeze.happened {
		t.Logf("freeze: %s stopped from %s to %s", s.freeze.replica, s.rel(&s.freeze.from), s.rel(&s.freeze.to))
	}
	if s.restart.happened {
		t.Logf("PostgreSQL restart: down from %s, up at %s", s.rel(&s.restart.from), s.rel(&s.restart.to))
	}
	return r
}

// describe shows an attempt, its times relative to the start of the soak.
func (s *soak) describe(c persistence.Computation) string {
	return fmt.Sprintf("#%d %s %s.%s %s attempt %d/%d replica=%s claimed=%s heartbeat_deadline=%s run_at=%s finished=%s key=%s computed_with=%s error=%q",
		c.ID, c.ExecutionID, c.GraphKey, c.Node, c.State, c.Attempt, c.MaxAttempts, deref(c.ReplicaID),
		s.rel(c.ClaimedAt), s.rel(c.HeartbeatDeadline), s.rel(&c.RunAt), s.rel(c.FinishedAt),
		deref(c.ConcurrencyKey), c.ComputedWith, deref(c.Error))
}

func deref(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}

// auditStuck counts what is left active: computations PENDING, AVAILABLE or RUNNING, ticks
// waiting to come due, and deliveries pending, and logs them.
func (s *soak) auditStuck(t *testing.T) int {
	t.Helper()
	var groups []struct {
		GraphKey string    `bun:"graph_key"`
		Node     string    `bun:"node"`
		State    string    `bun:"state"`
		N        int       `bun:"n"`
		Oldest   time.Time `bun:"oldest"`
	}
	s.mustQuery(t, &groups, `SELECT graph_key, node, state, count(*) AS n, min(run_at) AS oldest FROM {s}.computations
		WHERE state IN ('PENDING', 'AVAILABLE', 'RUNNING', 'PAUSED', 'WAITING') GROUP BY graph_key, node, state ORDER BY n DESC`)
	for _, g := range groups {
		t.Logf("stuck: %d × %s.%s %s, the oldest due since %s", g.N, g.GraphKey, g.Node, g.State, s.rel(&g.Oldest))
	}
	var comps []persistence.Computation
	s.mustQuery(t, &comps, `SELECT `+soakComputationColumns+` FROM {s}.computations
		WHERE state IN ('PENDING', 'AVAILABLE', 'RUNNING', 'PAUSED', 'WAITING') ORDER BY id`)
	for i, c := range comps {
		if i == soakShown {
			t.Logf("stuck: ... and %d more computations", len(comps)-i)
			break
		}
		t.Logf("stuck: computation %s", s.describe(c))
	}
	var ticks []struct {
		ID     string    `bun:"id"`
		WakeAt time.Time `bun:"wake_at"`
	}
	s.mustQuery(t, &ticks, `SELECT id, wake_at FROM {s}.executions WHERE wake_at IS NOT NULL AND archived_at IS NULL ORDER BY wake_at`)
	for i, e := range ticks {
		if i == soakShown {
			t.Logf("stuck: ... and %d more waiting ticks", len(ticks)-i)
			break
		}
		t.Logf("stuck: execution %s waits for a tick due at %s", e.ID, s.rel(&e.WakeAt))
	}
	var deliveries []struct {
		Key       string  `bun:"idempotency_key"`
		Attempts  int     `bun:"attempts"`
		LastError *string `bun:"last_error"`
	}
	s.mustQuery(t, &deliveries, `SELECT idempotency_key, attempts, last_error FROM {s}.notification_deliveries
		WHERE state = 'PENDING' ORDER BY id`)
	for i, d := range deliveries {
		if i == soakShown {
			t.Logf("stuck: ... and %d more pending deliveries", len(deliveries)-i)
			break
		}
		t.Logf("stuck: delivery of %s pending after %d attempts, last error %q", d.Key, d.Attempts, deref(d.LastError))
	}
	return len(comps) + len(ticks) + len(deliveries)
}

// logDatabaseState logs the replicas' heartbeats, and the sessions that wait for a lock, hold
// an advisory lock or have had a transaction open for more than a second: a replica that holds
// up the others shows up there, named by its application_name. It may run in any goroutine.
func (s *soak) logDatabaseState(t *testing.T, why string) {
	t.Helper()
	var replicas []persistence.Replica
	err := s.query(&replicas, `SELECT replica_id, last_heartbeat, started_at, graphs, stale_after_ms, targets,
			last_heartbeat < now() - stale_after_ms * interval '1 millisecond' AS stale
		FROM {s}.replica_heartbeats ORDER BY replica_id`)
	for _, r := range replicas {
		t.Logf("%s: replica %s: last heartbeat %s (stale: %t), started %s", why, r.ID, s.rel(&r.LastHeartbeat), r.Stale, s.rel(&r.StartedAt))
	}
	var sessions []struct {
		PID       int        `bun:"pid"`
		App       string     `bun:"application_name"`
		State     *string    `bun:"state"`
		Wait      *string    `bun:"wait"`
		Blocks    int        `bun:"blocks"`
		Blockers  string     `bun:"blockers"`
		XactStart *time.Time `bun:"xact_start"`
		Locks     *string    `bun:"locks"`
		Query     *string    `bun:"query"`
	}
	err = errors.Join(err, s.query(&sessions, `SELECT a.pid, a.application_name, a.state,
			a.wait_event_type || ':' || a.wait_event AS wait, pg_blocking_pids(a.pid)::text AS blockers,
			(SELECT count(*) FROM pg_stat_activity b WHERE a.pid = ANY(pg_blocking_pids(b.pid))) AS blocks,
			a.xact_start, left(a.query, 150) AS query,
			(SELECT count(*) || ' held' || coalesce(', awaits ' || string_agg(l.classid || ':' || l.objid, ', ') FILTER (WHERE NOT l.granted), '')
			 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory') AS locks
		FROM pg_stat_activity a
		WHERE a.pid <> pg_backend_pid() AND a.datname = current_database()
		  AND (a.xact_start < now() - interval '1 second' OR a.wait_event_type = 'Lock'
		       OR EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory'))
		ORDER BY blocks DESC, a.xact_start`))
	for i, a := range sessions {
		if i == soakShown {
			t.Logf("%s: ... and %d more sessions", why, len(sessions)-i)
			break
		}
		t.Logf("%s: session %d of %s: %s, blocks %d sessions, waits on %s for %s, transaction since %s, advisory locks: %s, query %q",
			why, a.PID, a.App, deref(a.State), a.Blocks, deref(a.Wait), a.Blockers, s.rel(a.XactStart), deref(a.Locks), deref(a.Query))
	}
	if err != nil {
		t.Logf("%s: reading the database's state: %v", why, err)
	}
}

// soakStall is how long the work of a killed or frozen replica may stay RUNNING before the soak
// logs the database's state: twice the workers' ReplicaStaleAfter and heartbeat timeout.
const soakStall = 4 * time.Second

// watch follows, in the background until none is left or the drain ends, the attempts that a
// killed or frozen replica held RUNNING at the time of the fault, and logs how they ended and
// when. If they outlast soakStall, it logs the database's state, the evidence of what holds
// the sweeper up.
func (s *soak) watch(t *testing.T, what, replica string, at time.Time) {
	t.Helper()
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		logged := false
		for {
			var n int
			err := s.query(&n, `SELECT count(*) FROM {s}.computations WHERE state = 'RUNNING' AND replica_id = ? AND claimed_at <= ?`,
				replica, at)
			if err != nil {
				n = -1 // unknown: PostgreSQL may be restarting
			}
			if n == 0 {
				var ended []struct {
					State string `bun:"state"`
					N     int    `bun:"n"`
				}
				err := s.query(&ended, `SELECT state, count(*) AS n FROM {s}.computations
					WHERE replica_id = ? AND claimed_at <= ? AND finished_at >= ? GROUP BY state ORDER BY state`, replica, at, at)
				switch {
				case err != nil:
					t.Logf("%s: reading how the attempts of %s ended: %v", what, replica, err)
				case len(ended) == 0:
					t.Logf("%s: %s was running no attempt", what, replica)
				default:
					t.Logf("%s: the attempts %s was running had all ended %.1fs after: %+v",
						what, replica, time.Since(at).Seconds(), ended)
				}
				return
			}
			if n > 0 && !logged && time.Since(at) > soakStall {
				logged = true
				t.Logf("%s: %d attempts of %s still RUNNING %.1fs after; the database's state follows",
					what, n, replica, time.Since(at).Seconds())
				s.logDatabaseState(t, what)
			}
			select {
			case <-s.drained:
				t.Logf("%s: %d attempts of %s still RUNNING at the end of the drain (-1: unknown, error %v)", what, n, replica, err)
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
}

// auditDoubles counts the double writes: two successes of a node at the same upstream
// revisions, a value revision written twice, a recurring tick that ran more cycles than it has.
func (s *soak) auditDoubles(t *testing.T) int {
	t.Helper()
	doubled := 0
	ticks := map[string]string{} // graph key → its recurring tick node
	for _, k := range s.kinds {
		if k.tick != "" {
			ticks[persistence.GraphKey(k.g.Name(), k.g.Version())] = k.tick
		}
	}

	var successes []struct {
		ExecutionID  string `bun:"execution_id"`
		GraphKey     string `bun:"graph_key"`
		Node         string `bun:"node"`
		ComputedWith string `bun:"computed_with"`
		Attempts     string `bun:"attempts"`
	}
	s.mustQuery(t, &successes, `SELECT execution_id, graph_key, node, computed_with::text AS computed_with,
			string_agg('#' || id || ' on ' || coalesce(replica_id, '-'), ', ' ORDER BY id) AS attempts
		FROM {s}.computations WHERE state = 'SUCCESS'
		GROUP BY execution_id, graph_key, node, computed_with::text HAVING count(*) > 1`)
	for _, d := range successes {
		// A recurring tick succeeds once per cycle, and nothing upstream of it changes between
		// its cycles: they all share one computed_with, by design. Its cycles are checked
		// instead by the value-revision check below (each cycle writes a new due time at a new
		// revision) and by the count of its successes.
		if ticks[d.GraphKey] == d.Node {
			continue
		}
		doubled++
		if doubled <= soakShown {
			t.Logf("doubled: %s.%s of %s succeeded more than once at upstream revisions %s: %s",
				d.GraphKey, d.Node, d.ExecutionID, d.ComputedWith, d.Attempts)
		}
	}

	var revisions []struct {
		ExecutionID string `bun:"execution_id"`
		Node        string `bun:"node"`
		Revision    int64  `bun:"revision"`
		Values      string `bun:"values"`
	}
	s.mustQuery(t, &revisions, `SELECT execution_id, node, revision, string_agg(value::text, ', ' ORDER BY id) AS values
		FROM (SELECT hseq AS id, execution_id, node, revision, value FROM {s}.value_history WHERE value IS NOT NULL
			UNION ALL SELECT history_id, execution_id, node, revision, value FROM {s}."values") h
		GROUP BY execution_id, node, revision HAVING count(*) > 1`)
	for _, d := range revisions {
		doubled++
		t.Logf("doubled: %s of %s written more than once at revision %d: %s", d.Node, d.ExecutionID, d.Revision, d.Values)
	}

	for key, node := range ticks {
		var cycles []struct {
			ExecutionID string `bun:"execution_id"`
			N           int    `bun:"n"`
		}
		s.mustQuery(t, &cycles, `SELECT execution_id, count(*) AS n FROM {s}.computations
			WHERE state = 'SUCCESS' AND graph_key = ? AND node = ? GROUP BY execution_id HAVING count(*) > ?`,
			key, node, tickCycles+1)
		for _, d := range cycles {
			doubled++
			t.Logf("doubled: tick %s of %s succeeded %d times, want %d (%d cycles and the pause)",
				node, d.ExecutionID, d.N, tickCycles+1, tickCycles)
		}
	}
	return doubled
}

// auditInvariants checks the state machine's invariants on the database after the run, across
// the lifecycle traffic, logs what breaks them, and returns how many do:
//   - a canceled execution starts nothing once its cancel has committed, nor do its children;
//   - a paused one starts nothing while paused, nor do its children;
//   - every map node's progress counts each ended child of its generation once;
//   - no rate window holds more than soakRateN starts, the released and abandoned ones included;
//   - no concurrency key has two holders at once.
//
// The times compared are all this machine's clock: the database's and the producer's.
func (s *soak) auditInvariants(t *testing.T) int {
	t.Helper()
	broken := 0
	held := 0
	for _, p := range s.produced {
		if p.op != soakCancel && p.op != soakPause {
			continue
		}
		held++
		var started []persistence.Computation
		s.mustQuery(t, &started, `SELECT `+soakComputationColumns+` FROM {s}.computations
			WHERE (execution_id = ? OR execution_id IN (SELECT id FROM {s}.executions WHERE parent->>'id' = ? AND parent IS NOT NULL))
				AND claimed_at > ? AND claimed_at < ? ORDER BY id`, p.id, p.id, p.held, p.release)
		for _, c := range started {
			broken++
			t.Logf("broken: %s of %s (%s) started at %s, while %s (from %s to %s)", c.Node, c.ExecutionID, p.id,
				s.rel(c.ClaimedAt), map[string]string{soakCancel: "canceled", soakPause: "paused"}[p.op], s.rel(&p.held), s.rel(&p.release))
		}
	}
	var counts []struct {
		ID    string `bun:"execution_id"`
		Node  string `bun:"node"`
		Total int    `bun:"total"`
		Done  int    `bun:"done"`
		Ended int    `bun:"ended"`
	}
	s.mustQuery(t, &counts, `SELECT m.execution_id, m.node, m.total, m.done, (SELECT count(*) FROM {s}.executions c
			WHERE c.parent->>'id' = m.execution_id AND c.parent IS NOT NULL AND c.parent->>'node' = m.node
				AND (c.parent->>'gen')::bigint = m.gen AND c.ended_at IS NOT NULL) AS ended
		FROM {s}.map_progress m`)
	for _, m := range counts {
		if m.Done != m.Ended {
			broken++
			t.Logf("broken: map node %s of %s counted %d ended children of %d, and %d have ended", m.Node, m.ID, m.Done, m.Total, m.Ended)
		}
	}
	var windows []struct {
		Key   string    `bun:"rate_key"`
		Start time.Time `bun:"start"`
		N     int       `bun:"n"`
	}
	s.mustQuery(t, &windows, `WITH s AS (SELECT attempt_id AS id, rate_key, claimed_at FROM {s}.attempts
			WHERE graph_key = 'soak-rated@v1' AND rate_key IS NOT NULL AND claimed_at IS NOT NULL
		UNION ALL SELECT attempt_id, rate_key, claimed_at FROM {s}.nodes
			WHERE graph_key = 'soak-rated@v1' AND rate_key IS NOT NULL AND claimed_at IS NOT NULL)
		SELECT a.rate_key, a.claimed_at AS start, count(*) AS n FROM s a
		JOIN s b ON b.rate_key = a.rate_key AND b.claimed_at >= a.claimed_at AND b.claimed_at < a.claimed_at + ? * interval '1 millisecond'
		GROUP BY a.id, a.rate_key, a.claimed_at HAVING count(*) > ?`, soakRatePer.Milliseconds(), soakRateN)
	for _, w := range windows {
		broken++
		t.Logf("broken: rate key %s started %d attempts within %v from %s, over %d", w.Key, w.N, soakRatePer, s.rel(&w.Start), soakRateN)
	}
	var overlaps []struct {
		Key    string    `bun:"concurrency_key"`
		A      int64     `bun:"a"`
		B      int64     `bun:"b"`
		AStart time.Time `bun:"a_start"`
		BStart time.Time `bun:"b_start"`
	}
	s.mustQuery(t, &overlaps, `WITH s AS (SELECT id, concurrency_key, claimed_at, coalesce(finished_at, 'infinity') AS ended
			FROM {s}.computations WHERE concurrency_key IS NOT NULL AND claimed_at IS NOT NULL)
		SELECT a.concurrency_key, a.id AS a, b.id AS b, a.claimed_at AS a_start, b.claimed_at AS b_start FROM s a
		JOIN s b ON b.concurrency_key = a.concurrency_key AND a.id < b.id AND a.claimed_at < b.ended AND b.claimed_at < a.ended`)
	for _, o := range overlaps {
		broken++
		t.Logf("broken: key %s held by attempts %d (from %s) and %d (from %s) at once", o.Key, o.A, s.rel(&o.AStart), o.B, s.rel(&o.BStart))
	}
	t.Logf("invariants: %d canceled or paused executions, %d map nodes, and the rate windows and keys checked: %d broken",
		held, len(counts), broken)
	return broken
}

// claimRow is a claimed lifecycle event with the state of its delivery to the handler.
type claimRow struct {
	ExecutionID string  `bun:"execution_id"`
	Event       string  `bun:"event"`
	Key         string  `bun:"idempotency_key"`
	Delivery    *string `bun:"delivery"`
	Attempts    *int    `bun:"attempts"`
	LastError   *string `bun:"last_error"`
}

func (s *soak) claims(t *testing.T) []claimRow {
	t.Helper()
	var claims []claimRow
	s.mustQuery(t, &claims, `SELECT c.execution_id, c.event, c.idempotency_key, d.state AS delivery, d.attempts, d.last_error
		FROM {s}.notification_claims c
		LEFT JOIN {s}.notification_deliveries d ON d.idempotency_key = c.idempotency_key AND d.target = ?
		ORDER BY c.claimed_at`, persistence.TargetHandler)
	return claims
}

// auditOutcomes checks that each execution completed, with the value its input calls for, or
// failed as designed, and that its event was claimed once and delivered. It returns how many did
// not, and logs them with their attempts and what the replicas logged about them.
func (s *soak) auditOutcomes(t *testing.T, claims []claimRow) int {
	t.Helper()
	byExec := map[string][]claimRow{}
	for _, c := range claims {
		byExec[c.ExecutionID] = append(byExec[c.ExecutionID], c)
	}
	var values []struct {
		ExecutionID string `bun:"execution_id"`
		Node        string `bun:"node"`
		Value       string `bun:"value"`
	}
	s.mustQuery(t, &values, `SELECT execution_id, node, value::text AS value FROM {s}."values"`)
	value := map[[2]string]string{}
	for _, v := range values {
		value[[2]string{v.ExecutionID, v.Node}] = v.Value
	}
	var latest []persistence.Computation
	s.mustQuery(t, &latest, `SELECT DISTINCT ON (execution_id, node) * FROM {s}.computations ORDER BY execution_id, node, id DESC`)
	last := map[[2]string]persistence.Computation{}
	for _, c := range latest {
		last[[2]string{c.ExecutionID, c.Node}] = c
	}

	lost, completed, failed := 0, 0, 0
	lostBy := map[string]int{}
	for _, p := range s.produced {
		k := s.kinds[p.kind]
		var problems []string
		events := map[string]int{}
		for _, c := range byExec[p.id] {
			events[c.Event]++
			if deref(c.Delivery) != persistence.DeliveryDelivered {
				problems = append(problems, fmt.Sprintf("%s delivery %s after %d attempts, last error %q",
					c.Event, deref(c.Delivery), deref0(c.Attempts), deref(c.LastError)))
			}
		}
		want, unwanted := persistence.EventCompleted, persistence.EventFailed
		switch {
		case p.op == soakCancel:
			// Canceled right after its start: it ends canceled, once, whatever it had done.
			want, unwanted = persistence.EventCanceled, persistence.EventFailed
		case p.n < 0:
			want, unwanted = unwanted, want
			c, ok := last[[2]string{p.id, k.failsAt}]
			if !ok || c.State != persistence.StateFailed || !strings.Contains(deref(c.Error), "by design") {
				problems = append(problems, fmt.Sprintf("%s did not fail by design: its last attempt is %s", k.failsAt, s.describe(c)))
			}
		default:
			if got, wantValue := value[[2]string{p.id, k.final}], strconv.FormatInt(k.want(p.n), 10); got != wantValue {
				problems = append(problems, fmt.Sprintf("%s = %q, want %s", k.final, got, wantValue))
			}
		}
		if events[want] != 1 {
			problems = append(problems, fmt.Sprintf("%s claimed %d times, want once", want, events[want]))
		}
		if events[unwanted] != 0 {
			problems = append(problems, fmt.Sprintf("%s claimed %d times, want never", unwanted, events[unwanted]))
		}
		if len(problems) == 0 {
			if p.n < 0 {
				failed++
			} else {
				completed++
			}
			continue
		}
		lost++
		lostBy[k.g.Name()]++
		if lost <= soakShown {
			s.logExecution(t, p, problems)
		}
	}
	t.Logf("outcomes: %d executions completed, %d failed by design, %d lost %v", completed, failed, lost, lostBy)
	return lost
}

func deref0(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// soakComputationColumns are the columns of persistence.Computation in the computations view.
const soakComputationColumns = `id, lane, execution_id, graph_key, node, state, attempt, max_attempts, replica_id, claim_token,
	run_at, claimed_at, deadline, heartbeat_deadline, last_heartbeat_at, abandon_after_ms, heartbeat_timeout_ms, computed_with,
	error, concurrency_key, max_parallel, created_at, finished_at, available_at, traceparent`

// logExecution logs a lost execution: its problems, its attempts, and the replicas' log lines
// that name it.
func (s *soak) logExecution(t *testing.T, p produced, problems []string) {
	t.Helper()
	t.Logf("lost: %s (%s, n=%d): %s", p.id, s.kinds[p.kind].g.Name(), p.n, strings.Join(problems, "; "))
	var comps []persistence.Computation
	s.mustQuery(t, &comps, `SELECT `+soakComputationColumns+` FROM {s}.computations WHERE execution_id = ? ORDER BY id`, p.id)
	for _, c := range comps {
		t.Logf("lost:   %s", s.describe(c))
	}
	shown := 0
	for _, w := range s.all {
		w.mu.Lock()
		for _, l := range w.logs {
			if strings.Contains(l, p.id) && shown < soakShown {
				shown++
				t.Logf("lost:   [%s] %s", w.id, l)
			}
		}
		w.mu.Unlock()
	}
}

// call is a call of an event handler, seen in a worker's output.
type call struct {
	replica string
	at      time.Time
}

// auditHandlers checks the handler calls the workers printed against the claims: every
// delivered event was handled, nothing unclaimed was, and a repeat (delivery is at least once)
// follows a kill of the replica that handled it first, or the PostgreSQL restart, either of
// which can end a delivery between the call and its record. A repeat with neither fails the test.
func (s *soak) auditHandlers(t *testing.T, claims []claimRow) {
	t.Helper()
	calls := map[string][]call{}
	for _, w := range s.all {
		w.mu.Lock()
		for i, l := range w.lines {
			if key, ok := strings.CutPrefix(l, "event "); ok {
				calls[key] = append(calls[key], call{replica: w.id, at: w.at[i]})
			}
		}
		w.mu.Unlock()
	}
	claimed := map[string]bool{}
	for _, c := range claims {
		claimed[c.Key] = true
		if deref(c.Delivery) == persistence.DeliveryDelivered && len(calls[c.Key]) == 0 {
			t.Errorf("event %s is DELIVERED but no handler printed it", c.Key)
		}
	}
	explained, unexplained := 0, 0
	for key, cs := range calls {
		if !claimed[key] {
			t.Errorf("a handler was called for %s, which was never claimed", key)
		}
		slices.SortFunc(cs, func(a, b call) int { return a.at.Compare(b.at) })
		for i := 1; i < len(cs); i++ {
			first, again := cs[i-1], cs[i]
			if s.interrupted(first, again.at) {
				explained++
				continue
			}
			unexplained++
			t.Errorf("event %s handled on %s at %s, then again on %s at %s, with no kill of %s nor PostgreSQL restart in between",
				key, first.replica, s.rel(&first.at), again.replica, s.rel(&again.at), first.replica)
		}
	}
	t.Logf("handlers: %d events claimed, %d handled; %d repeats after a kill or the restart, %d unexplained",
		len(claims), len(calls), explained, unexplained)
}

// interrupted reports whether the delivery of a call could have been cut off before it was
// recorded, by a kill of its replica or the PostgreSQL restart, before until. A killed replica
// printed every line before its kill, though the test may read the last ones after it.
func (s *soak) interrupted(c call, until time.Time) bool {
	for _, k := range s.kills {
		if k.replica == c.replica && !k.at.After(until) {
			return true
		}
	}
	return s.restart.happened && s.restart.to.After(c.at) && s.restart.from.Before(until)
}

// detection measures, for each kill, the time from the SIGKILL to the first attempt, running
// on another replica, that retries the killed replica's work; it returns the longest.
func (s *soak) detection(t *testing.T) time.Duration {
	t.Helper()
	var longest time.Duration
	for i, k := range s.kills {
		var row struct {
			Abandoned   int        `bun:"abandoned"`
			AbandonedAt *time.Time `bun:"abandoned_at"`
			First       *time.Time `bun:"first"`
		}
		s.mustQuery(t, &row, `SELECT count(DISTINCT a.id) AS abandoned, min(a.finished_at) AS abandoned_at, min(n.claimed_at) AS first
			FROM {s}.computations a
			LEFT JOIN {s}.computations n ON n.execution_id = a.execution_id AND n.node = a.node
				AND n.attempt = a.attempt + 1 AND n.id > a.id
			WHERE a.replica_id = ? AND a.state = 'ABANDONED' AND a.finished_at >= ?`, k.replica, k.at)
		switch {
		case row.Abandoned == 0:
			t.Logf("kill %d of %s at %s: it held no running work", i+1, k.replica, s.rel(&k.at))
		case row.First == nil:
			t.Logf("kill %d of %s at %s: %d attempts abandoned from %.1fs after the kill, none retried",
				i+1, k.replica, s.rel(&k.at), row.Abandoned, row.AbandonedAt.Sub(k.at).Seconds())
		default:
			d := row.First.Sub(k.at)
			longest = max(longest, d)
			t.Logf("kill %d of %s at %s: %d attempts abandoned from %.1fs after the kill, the first retried %.1fs after it",
				i+1, k.replica, s.rel(&k.at), row.Abandoned, row.AbandonedAt.Sub(k.at).Seconds(), d.Seconds())
		}
	}
	return longest
}

// logQueueing logs, for each node, how long its attempts waited from due (run_at) to claimed:
// a queue that grows without bound is a lack of capacity, not a stuck row.
func (s *soak) logQueueing(t *testing.T) {
	t.Helper()
	var nodes []struct {
		GraphKey string  `bun:"graph_key"`
		Node     string  `bun:"node"`
		N        int     `bun:"n"`
		Median   float64 `bun:"median"`
		Max      float64 `bun:"max"`
	}
	s.mustQuery(t, &nodes, `SELECT graph_key, node, count(*) AS n,
			percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM claimed_at - run_at)) AS median,
			max(extract(epoch FROM claimed_at - run_at)) AS max
		FROM {s}.computations WHERE claimed_at IS NOT NULL GROUP BY graph_key, node ORDER BY graph_key, node`)
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = fmt.Sprintf("%s.%s %d claims, median %.1fs, max %.1fs", n.GraphKey, n.Node, n.N, n.Median, n.Max)
	}
	t.Logf("queueing, from due to claimed: %s", strings.Join(parts, "; "))
}

// slogMsg finds the message of a slog text line.
var slogMsg = regexp.MustCompile(`msg=("[^"]*"|\S+)`)

// logReplicaLogs logs each message the replicas logged, most frequent first: how often, by
// which replicas, and its first occurrence in full.
func (s *soak) logReplicaLogs(t *testing.T) {
	t.Helper()
	type message struct {
		total int
		by    map[string]int
		first string
	}
	msgs := map[string]*message{}
	for _, w := range s.all {
		w.mu.Lock()
		for _, l := range w.logs {
			key := l
			if m := slogMsg.FindStringSubmatch(l); m != nil {
				key = strings.Trim(m[1], `"`)
			}
			m := msgs[key]
			if m == nil {
				m = &message{by: map[string]int{}, first: "[" + w.id + "] " + l}
				msgs[key] = m
			}
			m.total++
			m.by[w.id]++
		}
		w.mu.Unlock()
	}
	keys := slices.Collect(maps.Keys(msgs))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(msgs[b].total, msgs[a].total), cmp.Compare(a, b)) })
	for _, k := range keys {
		m := msgs[k]
		by := slices.Sorted(maps.Keys(m.by))
		for i, id := range by {
			by[i] = fmt.Sprintf("%s %d", id, m.by[id])
		}
		t.Logf("replicas logged %d × %q (%s); first: %s", m.total, k, strings.Join(by, ", "), m.first)
	}
}

// saveOutputs writes each replica's stdout (its computations and handler calls, one per line)
// and stderr (its logs) to the test's artifact directory, which `go test -artifacts -outputdir
// DIR` keeps.
func (s *soak) saveOutputs(t *testing.T) {
	t.Helper()
	dir := t.ArtifactDir()
	for _, w := range s.all {
		w.mu.Lock()
		var out strings.Builder
		for i, l := range w.lines {
			fmt.Fprintf(&out, "%s %s\n", s.rel(&w.at[i]), l)
		}
		stdout, stderr := out.String(), strings.Join(w.logs, "\n")+"\n"
		w.mu.Unlock()
		require.NoError(t, os.WriteFile(filepath.Join(dir, w.id+".out"), []byte(stdout), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, w.id+".log"), []byte(stderr), 0o644))
	}
	t.Logf("the replicas' output is in %s (kept with go test -artifacts -outputdir DIR)", dir)
}
