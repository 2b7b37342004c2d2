package journey

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"go.opentelemetry.io/otel/metric"

	"github.com/journey-go/journey/actors"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/telemetry"
	"github.com/journey-go/journey/migrations"
	"github.com/journey-go/journey/persistence"
	"github.com/journey-go/journey/scheduler"
	"github.com/journey-go/journey/sweeper"
)

const (
	// onSaveTimeout bounds one OnSave callback.
	onSaveTimeout = 30 * time.Second
	// listenWait bounds how long New waits for the LISTEN connection.
	listenWait = 10 * time.Second
	// stopGrace is how long Stop waits for functions to return once their contexts are canceled.
	// Config.Test.StopGrace replaces it.
	stopGrace = 5 * time.Second
	// workConns are the connections of the work's own pool: a claim, a batch of outcomes and the
	// notifications, each at most one at a time, and one to spare.
	workConns = 4
)

// Runtime is one replica of journey-go: it serves its graphs' executions, runs their
// computations, and sweeps. Any number of replicas may share a database and schema.
type Runtime struct {
	cfg     Config
	logger  *slog.Logger
	pool    *pgxpool.Pool
	ownPool bool
	sqldb   *sql.DB
	hbpool  *pgxpool.Pool // the heartbeats' own connections
	hbsqldb *sql.DB
	wpool   *pgxpool.Pool // the work's own connections: claims, outcomes, notifications
	wsqldb  *sql.DB
	store   *persistence.Store
	waiters *waiters

	tel        *telemetry.Telemetry
	observing  metric.Registration // the callback of the observable instruments
	lastBeat   atomic.Int64        // when this replica last wrote its heartbeat, in Unix nanoseconds
	sweep      *sweeper.Sweeper
	system     *actor.ActorSystem
	scheduler  *actor.PID // nil without Config.Schedules
	dispatcher *actor.PID
	listener   *actor.PID
	sweeper    *actor.PID
	replica    *actor.PID
	delivery   *actor.PID
	http       *http.Client
	cancelBase context.CancelFunc
	claims     *actors.ClaimGate
	local      *actors.Local                                      // hands the work that this replica's writes make ready to its dispatcher
	listening  chan struct{}                                      // closed once the listener's first LISTEN succeeded
	running    sync.WaitGroup                                     // claimed attempts whose goroutine has not ended
	orphaned   atomic.Bool                                        // set once Stop no longer waits for the running functions
	saves      atomic.Int64                                       // OnSave callbacks running
	saved      chan struct{}                                      // a signal when one of them returns
	starts     sync.Map                                           // its group of Starts with values, by startGroup (see startsOf)
	looks      *group[persistence.NodeRef, persistence.NodeState] // the Gets' looks, read together
	// writes are the groups of the Sets and the idle Starts, written together: one, or on Citus
	// one a lane (see writesOf).
	writes []*group[write, written]

	moves    clockMoves // a test clock's moves, acted on at once (now.go)
	identity persistence.Identity
	halted   atomic.Pointer[error] // why the replica halted (see actors.ReplicaConfig.OnHalt)
	stopped  atomic.Bool
	stopOnce sync.Once
	stopErr  error
}

// New connects to the database, migrates the schema (safe when several replicas start at once),
// records the graph versions it serves (for journey graphs and the dashboard) with its first
// heartbeat, and starts this replica's actors: the dispatcher, the listener and the sweeper. A
// graph whose version is recorded with another definition, which executions or live replicas
// still use, is refused with ErrGraphChanged, and New then writes nothing.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("journey: invalid config: %w", err)
	}
	r := &Runtime{
		cfg:     cfg,
		logger:  cfg.Logger.With("replica_id", cfg.ReplicaID),
		waiters: newWaiters(),
		pool:    cfg.Pool,
		saved:   make(chan struct{}, 1),
	}
	r.looks = &group[persistence.NodeRef, persistence.NodeState]{max: groupMax, write: r.lookAll}
	tel, err := telemetry.New(cfg.MeterProvider, cfg.TracerProvider)
	if err != nil {
		return nil, fmt.Errorf("journey: %w", err)
	}
	r.tel = tel
	if r.pool == nil {
		pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("journey: parsing Config.DatabaseURL: %w", err)
		}
		if !setsParam(cfg.DatabaseURL, "pool_max_conns") && pcfg.MaxConns < DefaultMaxConns {
			pcfg.MaxConns = DefaultMaxConns
		}
		switch {
		case cfg.pooled() && !setsParam(cfg.DatabaseURL, "default_query_exec_mode"):
			// A transaction pooler gives each transaction whichever server connection is free: a
			// statement prepared by name may be missing from the next one, and a session setting
			// would stay on a server connection that other clients share.
			pcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		case !cfg.pooled():
			pcfg.AfterConnect = sessionSettings(pcfg.ConnConfig.RuntimeParams, cfg.IdleInTransactionTimeout)
		}
		if r.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
			return nil, fmt.Errorf("journey: opening the pool: %w", err)
		}
		r.ownPool = true
	}
	// The heartbeats get two connections of their own, so that a pool full of work cannot starve
	// them; and the work gets workConns, so that callers queueing for the pool cannot starve what
	// answers them.
	if r.hbpool, err = ownConns(ctx, r.pool, 2); err != nil {
		r.closePool()
		return nil, fmt.Errorf("journey: opening the heartbeat pool: %w", err)
	}
	if r.wpool, err = ownConns(ctx, r.pool, workConns); err != nil {
		r.closePool()
		return nil, fmt.Errorf("journey: opening the work pool: %w", err)
	}
	if err := r.pool.Ping(ctx); err != nil {
		r.closePool()
		return nil, fmt.Errorf("journey: connecting to PostgreSQL: %w", err)
	}
	r.sqldb = persistence.OpenDB(r.pool)
	r.hbsqldb = persistence.OpenDB(r.hbpool)
	r.wsqldb = persistence.OpenDB(r.wpool)
	db := bun.NewDB(r.sqldb, pgdialect.New())
	hbdb := bun.NewDB(r.hbsqldb, pgdialect.New())
	wdb := bun.NewDB(r.wsqldb, pgdialect.New())
	if !cfg.SkipMigrations {
		if _, err := migrations.Migrate(ctx, db, cfg.Schema, r.logger); err != nil {
			r.closePool()
			return nil, fmt.Errorf("journey: migrating schema %q: %w", cfg.Schema, err)
		}
	}
	r.local = actors.NewLocal(cfg.ReplicaID)
	store, err := persistence.New(persistence.Config{
		DB: db, HeartbeatDB: hbdb, WorkDB: wdb, Schema: cfg.Schema, Graphs: cfg.Graphs, Clock: cfg.Test.Clock, Logger: r.logger,
		OnSave: r.fireSave, Handoff: r.waiters, Local: r.local, Routes: cfg.routes(), LockTimeout: cfg.LockTimeout, Hooks: cfg.Test.StoreHooks,
		Tracer: tel.Tracer,
	})
	if err != nil {
		r.closePool()
		return nil, fmt.Errorf("journey: %w", err)
	}
	r.store = store
	// Nothing is written before these checks: a replica they refuse changes nothing.
	if err := store.CheckRelease(ctx); err != nil {
		r.closePool()
		return nil, fmt.Errorf("journey: %w", err)
	}
	// On Citus, a group a lane: each group's write commits on its lane's worker alone, without
	// two-phase commit, and the lanes' writes go side by side.
	r.writes = make([]*group[write, written], 1)
	if store.Distributed() {
		r.writes = make([]*group[write, written], persistence.Lanes)
	}
	for i := range r.writes {
		r.writes[i] = &group[write, written]{max: groupMax, linger: writeLinger, write: r.writeAll,
			again: func(w write) bool { return w.start != nil }}
	}
	listen, err := r.holdIdentity(ctx)
	if err != nil {
		r.closePool()
		return nil, fmt.Errorf("journey: %w", err)
	}
	// The graph versions and the first heartbeat, which takes the replica's row over.
	if err := store.RecordGraphs(ctx, cfg.ReplicaID, r.identity, cfg.ReplicaStaleAfter); err != nil {
		closeConn(listen)
		r.closePool()
		if errors.Is(err, persistence.ErrGraphChanged) {
			return nil, err // it says "journey:" already, once a graph
		}
		return nil, fmt.Errorf("journey: %w", err)
	}
	if err := store.RefreshPaused(ctx); err != nil { // before the first claim
		closeConn(listen)
		r.closePool()
		return nil, fmt.Errorf("journey: %w", err)
	}
	r.beat()
	r.start(listen)
	r.observing, err = tel.Observe(telemetry.Sampler{
		ReplicaID:    cfg.ReplicaID,
		HeartbeatAge: func() time.Duration { return time.Since(time.Unix(0, r.lastBeat.Load())) },
		States:       r.sweep.SampleStates,
	})
	if err != nil {
		_ = r.Stop(ctx)
		return nil, fmt.Errorf("journey: registering the observable metrics: %w", err)
	}
	r.observeClock()
	if !cfg.PollOnly {
		r.waitListening(ctx)
	}
	r.firstSchedulePass(ctx)
	r.logger.Info("journey runtime started", "schema", cfg.Schema, "graphs", len(cfg.Graphs), "max_workers", cfg.MaxWorkers,
		"pooler", cfg.pooled(), "poll_only", cfg.PollOnly)
	return r, nil
}

// firstSchedulePass runs the scheduler's first pass, and waits for it until ctx ends: New returns
// with the schedules' rows recorded, and what a downtime left due started (see CatchUp). A failure
// is logged, and the next pass tries again.
func (r *Runtime) firstSchedulePass(ctx context.Context) {
	if r.scheduler == nil {
		return
	}
	done := make(chan struct{})
	r.system.Root.Send(r.scheduler, scheduler.Pass{Done: done})
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// waitListening waits, for up to listenWait, until the listener's LISTEN is up. Notifications are
// the main wake-up path: New returns once the replica hears them, so that a write made right
// after it is not left to the poll.
func (r *Runtime) waitListening(ctx context.Context) {
	wait := time.NewTimer(listenWait)
	defer wait.Stop()
	select {
	case <-r.listening:
	case <-ctx.Done():
	case <-wait.C:
	}
	select {
	case <-r.listening:
	default:
		r.logger.Warn("New returns before the LISTEN connection is up; until it is, work is found by the poll")
	}
}

// ErrPooler is returned by New when DatabaseURL goes through a connection pooler, and Config
// says neither ListenURL nor PollOnly.
var ErrPooler = errors.New("DatabaseURL goes through a connection pooler: set Config.ListenURL to a direct connection " +
	"for LISTEN, or Config.PollOnly (see the README's \"Behind a connection pooler\")")

// sessionSettings returns the pool's AfterConnect, for a direct connection: it puts
// persistence.PlanSettings on each new connection, but those that the connection string sets
// (params), and the idle-in-transaction timeout if positive, in one round trip. A connection
// through a pooler fails with ErrPooler instead, and gets no setting: it would stay on a server
// connection that other clients share. The pooler shows in the process id: a pooler announces
// one of its own at the start of the connection (for cancel requests), which is not that of the
// server process that runs the statement.
func sessionSettings(params map[string]string, idleInTx time.Duration) func(context.Context, *pgx.Conn) error {
	var names, values []string
	for name, value := range persistence.PlanSettings {
		if _, set := params[name]; !set {
			names, values = append(names, name), append(values, value)
		}
	}
	if idleInTx > 0 {
		names, values = append(names, "idle_in_transaction_session_timeout"), append(values, strconv.FormatInt(idleInTx.Milliseconds(), 10))
	}
	return func(ctx context.Context, conn *pgx.Conn) error {
		// The simple protocol: through a pooler, a statement prepared by name may fail before
		// the check could say why.
		announced := int64(conn.PgConn().PID())
		var pid int64
		// On a server that loads Citus, plans stay PostgreSQL's choice: Citus plans a generic plan
		// of a statement that passes a parameter to a function (unnest($1)) with no distributed
		// plan, and fails it. A transaction's SET LOCAL (its lock timeout) goes to the workers it
		// opens, where its rows are locked. And a statement across shards takes one connection a
		// worker: the runtime's sessions are many, and each connection that a statement opened
		// beyond the one a worker that Citus keeps was closed at its end, to be opened again (with
		// TLS) by the next, which took more of a busy coordinator than the statements did (journey
		// bench -rate 100: p50 0.6–0.8 s, and 0.2 s with one).
		err := conn.QueryRow(ctx, `SELECT pg_backend_pid(), (SELECT count(set_config(n, CASE WHEN n = 'plan_cache_mode'
				AND current_setting('citus.shard_count', true) IS NOT NULL THEN 'auto' ELSE v END, false))
			FROM unnest($1::text[], $2::text[]) AS s(n, v) WHERE pg_backend_pid() = $3::bigint),
			(SELECT count(set_config(n, v, false)) FROM (VALUES ('citus.propagate_set_commands', 'local'),
				('citus.max_adaptive_executor_pool_size', '1')) AS c(n, v) WHERE current_setting('citus.shard_count', true) IS NOT NULL)`,
			pgx.QueryExecModeSimpleProtocol, names, values, announced).Scan(&pid, nil, nil)
		switch {
		case err != nil:
			return fmt.Errorf("applying the session settings %s: %w", strings.Join(names, ", "), err)
		case pid != announced:
			return ErrPooler
		}
		return nil
	}
}

// start starts the replica's actors. listen, the LISTEN connection that holds the replica id's
// lock, goes to the listener (nil under PollOnly).
func (r *Runtime) start(listen *pgx.Conn) {
	base, cancel := context.WithCancel(context.WithValue(context.Background(), clockKey{}, r.cfg.Test.Clock))
	r.cancelBase = cancel
	r.claims = actors.NewClaimGate()
	r.listening = make(chan struct{})
	r.system = actors.NewSystem(r.logger)
	root := r.system.Root
	r.dispatcher = root.Spawn(actors.NewDispatcher(actors.DispatcherConfig{
		Store: r.store, ReplicaID: r.cfg.ReplicaID, MaxWorkers: r.cfg.MaxWorkers,
		PollInterval: r.cfg.PollInterval, MaxValueBytes: r.cfg.MaxValueBytes, Logger: r.logger, Base: base,
		Running: &r.running, Orphaned: &r.orphaned, Gate: r.claims, Local: r.local, Hooks: r.cfg.Test.Hooks, Telemetry: r.tel,
	}))
	r.replica = root.Spawn(actors.NewReplicaHeartbeat(actors.ReplicaConfig{
		Store: r.store, ReplicaID: r.cfg.ReplicaID, Interval: r.cfg.ReplicaHeartbeatInterval,
		StaleAfter: r.cfg.ReplicaStaleAfter, Dispatcher: r.dispatcher, Logger: r.logger, OnBeat: r.onBeat,
		Identity: r.identity, OnHalt: func(err error) { r.halted.Store(&err) },
	}))
	r.http = &http.Client{Timeout: r.cfg.NotificationTimeout}
	r.delivery = root.Spawn(actors.NewDelivery(actors.DeliveryConfig{
		Store: r.store,
		Policy: persistence.DeliveryPolicy{
			SendTimeout: r.cfg.NotificationTimeout, Backoff: r.cfg.Test.NotificationBackoff,
			Horizon: r.cfg.NotificationRetryHorizon, MaxAttempts: r.cfg.MaxDeliveryAttempts,
		},
		Send: r.send, PollInterval: r.cfg.PollInterval, Logger: r.logger, Telemetry: r.tel, Halted: r.isHalted,
	}))
	r.sweep = sweeper.New(sweeper.Config{
		Store: r.store, ReplicaID: r.cfg.ReplicaID, Interval: r.cfg.SweepInterval, Retention: r.cfg.Retention, Logger: r.logger,
		Telemetry: r.tel, Halted: r.isHalted,
	})
	r.sweeper = root.Spawn(r.sweep.Props())
	if schedules, _ := r.cfg.schedules(); len(schedules) > 0 {
		r.scheduler = root.Spawn(scheduler.New(scheduler.Config{
			Store: r.store, Schedules: schedules, Logger: r.logger, Halted: r.isHalted,
		}).Props())
	}
	if r.cfg.PollOnly {
		return
	}
	wake := func() { root.Send(r.dispatcher, actors.Wake{}) }
	r.listener = root.Spawn(actors.NewListener(actors.ListenerConfig{
		First: listen, Store: r.store,
		// A connection made again takes the id's lock again: if another process took it meanwhile,
		// the replica halts.
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			conn, locked, err := r.connectLocked(ctx)
			if err == nil && !locked && r.identity.Locked {
				root.Send(r.replica, actors.Halt{Err: fmt.Errorf("%w: another process holds the lock of replica id %s, "+
					"which this one held until its LISTEN connection was lost; this one claims nothing more: give each process "+
					"a ReplicaID of its own, and stop this one", ErrReplicaIDInUse, r.cfg.ReplicaID)})
			}
			return conn, err
		},
		Channel:     r.store.Channel(),
		OnWork:      wake,
		OnPromote:   func() { root.Send(r.dispatcher, actors.Promote{}) },
		OnCancel:    func(id string) { root.Send(r.dispatcher, actors.CancelExecution{ID: id}) },
		OnGraphs:    func() { r.refreshPaused(); wake() },
		OnExecution: r.waiters.wake,
		OnNotice:    func() { root.Send(r.delivery, actors.Wake{}) },
		OnRequest:   func() { root.Send(r.sweeper, sweeper.Requests{}) },
		Listening:   r.listening,
		OnReconnect: func() {
			r.refreshPaused()
			wake()
			root.Send(r.delivery, actors.Wake{})
			root.Send(r.sweeper, sweeper.Requests{})
			r.waiters.wakeAll()
		},
		Logger: r.logger,
	}))
}

// refreshPaused reads which graph versions are paused (PauseGraph), after a notification said
// one changed; a failure leaves the last reading, which the next notification or reconnect mends.
func (r *Runtime) refreshPaused() {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.LockTimeout)
	defer cancel()
	if err := r.store.RefreshPaused(ctx); err != nil {
		r.logger.Warn("reading the paused graph versions failed", "error", err)
	}
}

// isHalted reports whether the replica has halted (see actors.ReplicaConfig.OnHalt): it claims,
// sweeps and delivers nothing more.
func (r *Runtime) isHalted() bool { return r.halted.Load() != nil }

// onBeat follows each heartbeat: it notes it, and, where no NOTIFY announces a graph version
// paused (Config.PollOnly), reads the paused versions.
func (r *Runtime) onBeat() {
	r.beat()
	if r.cfg.PollOnly {
		r.refreshPaused()
	}
}

// beat notes that this replica has just written its heartbeat.
func (r *Runtime) beat() { r.lastBeat.Store(time.Now().UnixNano()) }

// fireSave runs the OnSave callbacks of a committed change, the node's first and then the
// graph's, in a goroutine of their own.
func (r *Runtime) fireSave(g *graph.Graph, e graph.SaveEvent) {
	n, _ := g.Node(e.Node)
	nodeFn, graphFn := n.Settings().OnSave, g.OnSave()
	if nodeFn == nil && graphFn == nil {
		return // no goroutine: most saves have no callback
	}
	r.runSave(nodeFn, graphFn, e)
}

// runSave runs the callbacks of a save in a goroutine of its own (see fireSave), apart so that a
// save without callbacks puts nothing on the heap.
func (r *Runtime) runSave(nodeFn, graphFn func(context.Context, graph.SaveEvent), e graph.SaveEvent) {
	r.saves.Add(1)
	go func() {
		defer func() {
			r.saves.Add(-1)
			select {
			case r.saved <- struct{}{}:
			default:
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), onSaveTimeout)
		defer cancel()
		for _, fn := range [...]func(context.Context, graph.SaveEvent){nodeFn, graphFn} {
			if fn == nil {
				continue
			}
			func() {
				defer func() {
					if p := recover(); p != nil {
						r.logger.Error("OnSave panicked", "execution_id", e.ExecutionID, "node", e.Node, "panic", p)
					}
				}()
				fn(ctx, e)
			}()
		}
	}()
}

// Stop stops the replica gracefully. It stops claiming and lets the running computations finish
// until ctx ends. It then cancels the contexts of those still running, and waits up to 5 seconds
// for their functions to return, heartbeating them meanwhile: an attempt whose function returns
// an error then is released, without consuming an attempt, so that another replica takes it over
// at once (its claim stays in the attempts' history, and in its rate window; the attempt waits
// again as a new one would, PAUSED in a paused execution); a result returned all the same is
// recorded. An attempt whose function
// still runs after that stays RUNNING, and another replica takes it over once its heartbeat
// deadline passes, as it would a crashed replica's: no two replicas ever run one attempt at once.
// Stop then stops the actors, deletes the replica's heartbeat row (unless such an attempt is
// left), waits for the OnSave callbacks in flight until ctx ends and, if the runtime opened the
// pool, closes it. Calls after the first return the first call's result.
func (r *Runtime) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() { r.stopErr = r.stop(ctx) })
	return r.stopErr
}

func (r *Runtime) stop(ctx context.Context) error {
	r.stopped.Store(true)
	r.stopObservingClock()
	var errs []error
	r.drain(ctx)
	// Cancel first, and release only what has returned (each attempt releases itself), so that
	// another replica never starts an attempt whose function still runs here.
	r.cancelBase()
	grace := cmp.Or(r.cfg.Test.StopGrace, stopGrace)
	returned := waitGroup(&r.running, grace)
	if !returned {
		r.orphaned.Store(true)
		r.logger.Warn("some computations ignore their context and have not returned; they stay RUNNING, and "+
			"another replica takes them over once their heartbeat deadline passes", "waited", grace)
	}
	if r.observing != nil {
		if err := r.observing.Unregister(); err != nil {
			errs = append(errs, fmt.Errorf("unregistering the observable metrics: %w", err))
		}
	}
	for _, pid := range []*actor.PID{r.scheduler, r.sweeper, r.dispatcher, r.replica, r.delivery, r.listener} {
		if pid == nil {
			continue // PollOnly: no listener; no Schedules: no scheduler
		}
		if err := r.system.Root.PoisonFuture(pid).Wait(); err != nil {
			errs = append(errs, fmt.Errorf("stopping actor %s: %w", pid.Id, err))
		}
	}
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	// With attempts left RUNNING, the row stays, and goes stale as a crashed replica's would:
	// without it, another replica would take them over at once. A halted replica leaves its
	// claims and its row alone: another process holds the row, and its claims too, or the schema
	// is a newer release's.
	if returned && !r.isHalted() {
		// Claims left RUNNING now are claims that no attempt took up: the stop ended their claim
		// or write before its answer came back, though the database committed it.
		if n, err := r.store.ReleaseReplica(dctx, r.cfg.ReplicaID); err != nil {
			errs = append(errs, err)
		} else if n > 0 {
			r.logger.Info("released the claims that the stop interrupted", "count", n)
		}
		if err := r.store.DeleteReplica(dctx, r.cfg.ReplicaID, r.identity.Incarnation); err != nil {
			errs = append(errs, err)
		}
	}
	if err := r.sweep.Release(dctx); err != nil {
		errs = append(errs, err)
	}
	cancel()
	if !r.waitSaves(ctx) {
		r.logger.Warn("some OnSave callbacks have not returned; they go on until their own timeout",
			"timeout", onSaveTimeout)
	}
	r.system.Shutdown()
	r.store.Stop() // the notifications of the last writes, before the pool closes
	r.closePool()
	r.logger.Info("journey runtime stopped")
	return errors.Join(errs...)
}

// setsParam reports whether connString sets the parameter name, such as pool_max_conns.
// pgxpool.ParseConfig reads those it knows and removes them from the parameters, so it is looked
// for in pgconn's parse, which keeps them.
func setsParam(connString, name string) bool {
	c, err := pgconn.ParseConfig(connString)
	return err == nil && c.RuntimeParams[name] != ""
}

// ownConns opens a pool of n connections configured as pool's.
func ownConns(ctx context.Context, pool *pgxpool.Pool, n int32) (*pgxpool.Pool, error) {
	cfg := pool.Config().Copy()
	cfg.MaxConns, cfg.MinConns = n, 0
	return pgxpool.NewWithConfig(ctx, cfg)
}

func (r *Runtime) closePool() {
	for _, db := range []*sql.DB{r.sqldb, r.hbsqldb, r.wsqldb} {
		if db != nil {
			_ = db.Close()
		}
	}
	for _, p := range []*pgxpool.Pool{r.hbpool, r.wpool} {
		if p != nil {
			p.Close()
		}
	}
	if r.ownPool {
		r.pool.Close()
	}
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// drain stops claiming and waits until no computation runs on this replica, or ctx ends. Either
// way, once it returns the dispatcher claims nothing more, even if it was too busy to read the
// request, and every attempt it claimed counts in r.running.
func (r *Runtime) drain(ctx context.Context) {
	defer r.claims.Close()
	r.local.Close() // the writes claim nothing more; what they claimed is spawned as claims are
	drained := make(chan struct{})
	r.system.Root.Send(r.dispatcher, actors.StopClaiming{Drained: drained})
	select {
	case <-drained:
	case <-ctx.Done():
	}
}

// waitSaves waits until no OnSave callback runs, or ctx ends, and reports whether none runs.
func (r *Runtime) waitSaves(ctx context.Context) bool {
	for r.saves.Load() > 0 {
		select {
		case <-r.saved:
		case <-ctx.Done():
			return r.saves.Load() == 0
		}
	}
	return true
}

// waitGroup waits for wg until timeout, and reports whether it finished.
func waitGroup(wg *sync.WaitGroup, timeout time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}
