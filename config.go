package journey

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/journey-go/journey/actors"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
	"github.com/journey-go/journey/migrations"
	"github.com/journey-go/journey/persistence"
	"github.com/journey-go/journey/sweeper"
)

// Defaults of Config.
const (
	DefaultSchema        = "journey"
	DefaultMaxWorkers    = actors.DefaultMaxWorkers
	DefaultPollInterval  = actors.DefaultPollInterval
	DefaultSweepInterval = sweeper.DefaultInterval
	// DefaultReplicaHeartbeatInterval is how often a replica writes its heartbeat row.
	DefaultReplicaHeartbeatInterval = actors.DefaultReplicaHeartbeatInterval
	// DefaultReplicaStaleAfter is how old a replica's heartbeat may get before its work is reclaimed.
	DefaultReplicaStaleAfter = actors.DefaultReplicaStaleAfter
	// DefaultNotificationTimeout bounds one handler call or webhook request.
	DefaultNotificationTimeout = 10 * time.Second
	// DefaultNotificationRetryHorizon is how long a notification's delivery is retried.
	DefaultNotificationRetryHorizon = 72 * time.Hour
	// DefaultMaxValueBytes caps the JSON encoding of a value: 1 MiB.
	DefaultMaxValueBytes = actors.DefaultMaxValueBytes
	// DefaultMaxConns is the pool size when the runtime opens the pool itself and the URL does
	// not set pool_max_conns.
	DefaultMaxConns = 20
	// DefaultIdleInTransactionTimeout bounds how long the runtime's sessions may sit idle inside a
	// transaction before PostgreSQL ends them.
	DefaultIdleInTransactionTimeout = 30 * time.Second
	// DefaultLockTimeout bounds how long the runtime's background work waits for a lock.
	DefaultLockTimeout = 3 * time.Second
	// DefaultRetention is how long finished attempts, value history and delivered notifications
	// are kept.
	DefaultRetention = sweeper.DefaultRetention
)

// Config configures a Runtime. The zero value of every field but DatabaseURL (or Pool) and
// Graphs is a sensible default.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string, e.g.
	// "postgres://user:pass@localhost:5432/app". Required unless Pool is set. pgxpool's
	// pool_max_conns (default DefaultMaxConns) and pool_min_conns (default 0) size the runtime's
	// pool. A pool that opens its connections under load serves the first seconds slowly: each
	// new connection prepares and plans every statement on its first use. pool_min_conns equal
	// to pool_max_conns opens them when the replica starts.
	DatabaseURL string
	// Pool is a ready pgx pool to use instead of DatabaseURL. The runtime does not close it. Any
	// QueryExecMode works; with pgx's default, QueryExecModeCacheStatement (the runtime's own
	// pool's), the statements of the hot path are prepared once per connection. The runtime's own
	// pool also sets plan_cache_mode=force_generic_plan, enable_seqscan=off,
	// enable_bitmapscan=off and jit=off on its connections as each connects (a SET, never in the
	// startup packet, which a pooler refuses), unless DatabaseURL sets them or goes through a
	// pooler (see ListenURL): each statement is planned once per connection, and the plan reads
	// the indexes, row by row, even if it was made while the tables were young. A pool of yours
	// keeps its own settings; set those in its ConnConfig.RuntimeParams for the same plans.
	Pool *pgxpool.Pool
	// ListenURL is a direct connection to PostgreSQL, for LISTEN alone, when DatabaseURL goes
	// through a transaction pooler (PgBouncer in pool_mode=transaction, Supavisor, RDS Proxy),
	// which cannot hold a LISTEN: a session there is one transaction long. With it, the runtime
	// takes DatabaseURL for such a pooler. Its statements are not prepared by name, which a
	// pooler without max_prepared_statements breaks: each is parsed and planned at each call
	// (pgx's QueryExecModeCacheDescribe, one round trip as before), unless DatabaseURL sets
	// default_query_exec_mode (cache_statement, behind PgBouncer 1.21 or later with
	// max_prepared_statements, prepares them again, as docs/operating.md recommends). And it puts
	// no setting on a session, where it would stay on a server connection that other clients
	// share: not the plan settings of Pool's comment (give them to the pooler's server
	// connections), nor IdleInTransactionTimeout (set PgBouncer's idle_transaction_timeout
	// instead). "Behind a connection pooler" in docs/operating.md gives PgBouncer's settings and
	// what they cost. With Pool instead of DatabaseURL, the pool is yours: give it a
	// QueryExecMode that works behind the pooler, such as pgx.QueryExecModeCacheDescribe. Default
	// "": DatabaseURL is direct, and carries LISTEN too.
	ListenURL string
	// PollOnly: no LISTEN at all, for a transaction pooler that cannot be paired with a direct
	// connection. DatabaseURL is taken for a pooler, as with ListenURL. Work and values that this
	// replica writes itself reach its dispatcher and its waiting Get calls at once, as always;
	// what other replicas write is found by the poll, every PollInterval: a Get(WaitAny) of a
	// value that another replica computes returns up to PollInterval after the commit, and work
	// that another replica makes ready waits up to PollInterval when this one has the free
	// workers. Default false.
	PollOnly bool
	// Schema holds journey's tables: at most 63 bytes, without ? or NUL. Default "journey". It is
	// created if missing.
	Schema string
	// Graphs are the graphs this replica serves: it runs their computations, and Start accepts
	// only these. At least one is required.
	Graphs []*graph.Graph
	// ReplicaID names this replica in claims and logs. Default: host name, pid and a random suffix.
	// A stable one (a pod's name) lets a replica restarted after a crash take its work back at
	// once, rather than after ReplicaStaleAfter. One live process holds an id at a time: New
	// refuses a second (ErrReplicaIDInUse), and a replica that finds its row taken claims nothing
	// more. Unless PollOnly, the holder keeps an advisory lock of the id on its LISTEN connection,
	// which dies with its process; under PollOnly, New waits for the holder's heartbeat to go
	// stale (at most its ReplicaStaleAfter) before it takes the id over.
	ReplicaID string
	// MaxWorkers caps the functions running at once on this replica. Default 100. An attempt
	// whose function has returned frees its worker while its outcome is recorded (up to three
	// times MaxWorkers such attempts), so that the next claims overlap the recording.
	MaxWorkers int
	// PollInterval is how often the replica looks for work and for awaited values when no
	// notification came. Notifications (LISTEN/NOTIFY) are the main path, unless PollOnly.
	// Default 1s.
	PollInterval time.Duration
	// SweepInterval is the time between the starts of two sweeper passes, which abandon
	// computations past their deadlines and promote due retries; a pass that takes longer is
	// followed by the next at once. Default 5s.
	SweepInterval time.Duration
	// ReplicaHeartbeatInterval is how often this replica upserts its row in replica_heartbeats.
	// The first heartbeat is written in New, before anything is claimed. While it fails, the
	// replica claims nothing. Default 5s.
	ReplicaHeartbeatInterval time.Duration
	// ReplicaStaleAfter: the sweeper abandons the RUNNING computations of any replica whose
	// heartbeat is older than this, or missing, and retries them elsewhere. It finds a dead process
	// faster than the computations' own heartbeat timeouts. It must be more than twice
	// ReplicaHeartbeatInterval. Default 20s.
	ReplicaStaleAfter time.Duration
	// Logger receives the runtime's logs. Default slog.Default().
	Logger *slog.Logger
	// OnExecutionFailed is called once, across all replicas, when a node of an execution has
	// failed for good (see ErrComputationFailed); again only after Retry. An error retries the delivery with backoff.
	// Delivery is at least once: use the event's IdempotencyKey to drop repeats. Default nil.
	//
	// The handlers may run before New returns: a replica delivers what is pending (events of
	// earlier runs, or of other replicas) from its start. So a handler must not use the variable
	// that New's result goes to; it gets the runtime as e.Runtime, and reads the execution with it
	// (e.Runtime.Values(ctx, e.ExecutionID)).
	OnExecutionFailed func(ctx context.Context, e ExecutionEvent) error
	// OnExecutionCompleted is called once when the graph's CompletesWhen gate holds and nothing
	// is pending or running. Default nil.
	OnExecutionCompleted func(ctx context.Context, e ExecutionEvent) error
	// OnExecutionCanceled is called once when the execution is canceled (Runtime.Cancel), with
	// the reason in the event. Default nil.
	OnExecutionCanceled func(ctx context.Context, e ExecutionEvent) error
	// Webhooks receive the same events as signed HTTP POSTs of JSON. Default none.
	Webhooks []Webhook
	// Schedules start executions of the graphs at the fire times of their crons: one execution per
	// fire time across all replicas that list the schedule (see Schedule). Each schedule's graph
	// must be one of Graphs. Default none.
	Schedules []Schedule
	// NotificationTimeout bounds one handler call or webhook request. Default 10s.
	NotificationTimeout time.Duration
	// NotificationRetryHorizon is how long after its event a delivery that fails is retried:
	// with backoff from 1s, doubling, capped at an hour, and a last attempt at the horizon. A
	// delivery that fails then is marked DEAD, visibly in Notifications. Default 72h.
	NotificationRetryHorizon time.Duration
	// MaxDeliveryAttempts, if positive, also marks a delivery DEAD after that many failed
	// attempts, even within the horizon. Default 0: no cap, the horizon decides.
	MaxDeliveryAttempts int
	// IdleInTransactionTimeout is PostgreSQL's idle_in_transaction_session_timeout on the
	// runtime's own connections. A replica frozen inside a transaction (SIGSTOP, a long GC pause,
	// a VM migration) holds that transaction's locks, and PostgreSQL sees an idle session, not a
	// dead one; after this long, it ends the session and frees the locks, so that other replicas
	// go on. The runtime's transactions never wait on the application, and a notification's
	// delivery extends it for itself. Default 30s; negative leaves the server's setting. With
	// Config.Pool, set it on that pool's connections yourself; behind a pooler (ListenURL or
	// PollOnly), set the pooler's own timeout.
	IdleInTransactionTimeout time.Duration
	// LockTimeout is PostgreSQL's lock_timeout for the runtime's background work: sweeps, tick
	// wake-ups and promotions give up on a lock held longer (by a frozen replica, say), and try
	// again at their next pass, instead of stalling every replica behind it. The recording of
	// computations' outcomes gives up too, logs who held the lock, and tries again. Calls such as
	// Set wait for as long as their context allows. Default 3s.
	LockTimeout time.Duration
	// Retention: finished attempts (all but the newest of each node, which decides what runs
	// next), the history of values since replaced or cleared, and delivered notifications older
	// than this are deleted by the sweeper, in batches, pass after pass while any are left.
	// Values, historians and notification claims are kept. Default 7 days; negative keeps
	// everything forever.
	Retention time.Duration
	// MaxValueBytes caps the size of a value's JSON encoding. Set, SetMany, Start and StartMany
	// refuse a larger value, or metadata, with ErrInvalidValue; a computation whose result is
	// larger fails at once, with no retry. The values the runtime builds itself, such as a
	// historian's, are not capped. Default 1 MiB (DefaultMaxValueBytes).
	MaxValueBytes int
	// MeterProvider receives the runtime's metrics (journey.*; the README lists them). Default
	// otel.GetMeterProvider(), the global provider, which records nothing unless the application
	// sets one.
	MeterProvider metric.MeterProvider
	// TracerProvider receives the runtime's spans: one for each Start, StartMany, Set and SetMany,
	// each attempt, and each abandonment. An attempt's span links to the span of the write that
	// created it, through a W3C traceparent stored with the attempt, whichever replica wrote it.
	// Default otel.GetTracerProvider(), the global provider, which records nothing unless the
	// application sets one.
	TracerProvider trace.TracerProvider
	// SkipMigrations skips the schema migrations at New, for deployments that run
	// `journey migrate` themselves. Default false.
	SkipMigrations bool
	// Test holds knobs for tests only.
	Test TestConfig
}

// TestConfig holds knobs for tests only. Production code leaves it zero.
type TestConfig struct {
	// Clock replaces the database's now() in every decision made by time. Default: the database.
	Clock clock.Clock
	// Hooks reach into the actors.
	Hooks actors.Hooks
	// StoreHooks reach into the database layer.
	StoreHooks persistence.Hooks
	// NotificationBackoff replaces the wait between delivery attempts (default: 1s, doubling,
	// capped at an hour).
	NotificationBackoff func(attempts int) time.Duration
	// StopGrace replaces how long Stop waits for the functions to return once it has canceled
	// their contexts (default 5s).
	StopGrace time.Duration
}

// maxReplicaIDBytes caps Config.ReplicaID, which the running attempts' index holds.
const maxReplicaIDBytes = 1 << 10

// pooled reports whether DatabaseURL goes through a transaction pooler: ListenURL or PollOnly
// says so.
func (c Config) pooled() bool { return c.ListenURL != "" || c.PollOnly }

func (c Config) withDefaults() Config {
	c.Schema = cmp.Or(c.Schema, DefaultSchema)
	c.ReplicaID = cmp.Or(c.ReplicaID, defaultReplicaID())
	c.MaxWorkers = cmp.Or(c.MaxWorkers, DefaultMaxWorkers)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.SweepInterval = cmp.Or(c.SweepInterval, DefaultSweepInterval)
	c.ReplicaHeartbeatInterval = cmp.Or(c.ReplicaHeartbeatInterval, DefaultReplicaHeartbeatInterval)
	c.ReplicaStaleAfter = cmp.Or(c.ReplicaStaleAfter, DefaultReplicaStaleAfter)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.IdleInTransactionTimeout = cmp.Or(c.IdleInTransactionTimeout, DefaultIdleInTransactionTimeout)
	c.LockTimeout = cmp.Or(c.LockTimeout, DefaultLockTimeout)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.NotificationTimeout = cmp.Or(c.NotificationTimeout, DefaultNotificationTimeout)
	c.NotificationRetryHorizon = cmp.Or(c.NotificationRetryHorizon, DefaultNotificationRetryHorizon)
	c.MaxValueBytes = cmp.Or(c.MaxValueBytes, DefaultMaxValueBytes)
	if c.Test.NotificationBackoff == nil {
		c.Test.NotificationBackoff = deliveryBackoff
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.Test.Clock == nil {
		c.Test.Clock = clock.Real{}
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.DatabaseURL == "" && c.Pool == nil {
		errs = append(errs, errors.New("config: DatabaseURL is empty: set it to a PostgreSQL URL, or set Pool"))
	}
	if c.ListenURL != "" && c.PollOnly {
		errs = append(errs, errors.New("config: ListenURL and PollOnly are both set: PollOnly means no LISTEN at all; "+
			"keep ListenURL for wake-ups by notification, or PollOnly alone"))
	}
	if c.ListenURL != "" {
		if _, err := pgx.ParseConfig(c.ListenURL); err != nil {
			errs = append(errs, fmt.Errorf("config: ListenURL: %w", err))
		}
	}
	if len(c.Graphs) == 0 {
		errs = append(errs, errors.New("config: Graphs is empty: register the graphs this replica serves"))
	}
	if !utf8.ValidString(c.ReplicaID) || strings.ContainsFunc(c.ReplicaID, unicode.IsControl) || len(c.ReplicaID) > maxReplicaIDBytes {
		// It is stored with every claim, in an index, and in the replica's heartbeat.
		errs = append(errs, fmt.Errorf("config: ReplicaID %q must be valid UTF-8 with no control characters, at most %d bytes",
			c.ReplicaID, maxReplicaIDBytes))
	}
	seen := map[string]bool{}
	for i, g := range c.Graphs {
		if g == nil {
			errs = append(errs, fmt.Errorf("config: Graphs[%d] is nil", i))
			continue
		}
		key := persistence.GraphKey(g.Name(), g.Version())
		if seen[key] {
			errs = append(errs, fmt.Errorf("config: Graphs: graph %q version %q is registered twice", g.Name(), g.Version()))
		}
		seen[key] = true
	}
	for _, g := range c.Graphs {
		if g == nil {
			continue
		}
		for _, n := range g.Nodes() {
			if child := n.ChildGraph(); child != nil && !seen[persistence.GraphKey(child.Name(), child.Version())] {
				errs = append(errs, fmt.Errorf("config: Graphs: node %q of graph %q starts executions of graph %q version %q, "+
					"which Graphs does not list: add it", n.Name(), g.Name(), child.Name(), child.Version()))
			}
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"PollInterval", c.PollInterval}, {"SweepInterval", c.SweepInterval},
		{"ReplicaHeartbeatInterval", c.ReplicaHeartbeatInterval}, {"ReplicaStaleAfter", c.ReplicaStaleAfter},
		{"LockTimeout", c.LockTimeout}, {"NotificationRetryHorizon", c.NotificationRetryHorizon}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("config: %s is negative (%v): leave it zero for the default", d.name, d.v))
		}
	}
	if c.ReplicaStaleAfter > 0 && c.ReplicaStaleAfter <= 2*c.ReplicaHeartbeatInterval {
		errs = append(errs, fmt.Errorf("config: ReplicaStaleAfter (%v) must be more than twice ReplicaHeartbeatInterval (%v), or live replicas would be taken for dead",
			c.ReplicaStaleAfter, c.ReplicaHeartbeatInterval))
	}
	errs = append(errs, validateWebhooks(c.Webhooks)...)
	_, scheduleErrs := c.schedules()
	errs = append(errs, scheduleErrs...)
	if c.MaxDeliveryAttempts < 0 {
		errs = append(errs, fmt.Errorf("config: MaxDeliveryAttempts is negative (%d): leave it zero to retry until NotificationRetryHorizon",
			c.MaxDeliveryAttempts))
	}
	if c.MaxWorkers < 0 {
		errs = append(errs, fmt.Errorf("config: MaxWorkers is negative (%d): leave it zero for the default", c.MaxWorkers))
	}
	if c.MaxValueBytes < 0 {
		errs = append(errs, fmt.Errorf("config: MaxValueBytes is negative (%d): leave it zero for the default", c.MaxValueBytes))
	}
	if err := migrations.ValidSchema(c.Schema); err != nil {
		errs = append(errs, fmt.Errorf("config: Schema: %w", err))
	}
	return errors.Join(errs...)
}

func defaultReplicaID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", cmp.Or(host, "host"), os.Getpid(), randomSuffix())
}
