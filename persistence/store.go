package persistence

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
	"go.opentelemetry.io/otel/trace"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
	"github.com/journey-go/journey/internal/telemetry"
	"github.com/journey-go/journey/persistence/machine"
)

// Errors returned by the Store. The root package re-exports them.
var (
	// ErrNotFound means there is no such execution.
	ErrNotFound = errors.New("journey: execution not found")
	// ErrUnknownGraph means the graph (name and version) is not registered on this replica.
	ErrUnknownGraph = errors.New("journey: graph not registered")
	// ErrOutcomeUnknown means a write's COMMIT got no answer (the connection broke, or the context
	// ended, as it was sent): the server may or may not have committed it.
	ErrOutcomeUnknown = errors.New("journey: the outcome of the write is unknown (its COMMIT got no answer)")
)

// Notification payloads sent on the store's channel. A payload of PayloadWork means new work is
// available; PayloadExecution and a comma-separated list of changes means a value or a node's
// outcome changed in each of those executions: each change is an id, or id@revision, the
// execution's revision after the change (read it with ParseChange). PayloadPromote means a
// write in an application's transaction made work due that waits for a concurrency key or a
// limit, which a replica promotes (PromoteDue) and then claims.
const (
	PayloadWork      = "w"
	PayloadExecution = "x:"
	PayloadPromote   = "p"
	// PayloadCancel and an execution's id: the execution was canceled, and the replicas that run
	// its attempts cancel them.
	PayloadCancel = "c:"
)

// ParseChange reads a change of a PayloadExecution notification: the execution's id, and its
// revision, or -1 if the change does not give one.
func ParseChange(change string) (id string, revision int64) {
	id, rev, ok := strings.Cut(change, "@")
	if !ok {
		return id, -1
	}
	r, err := strconv.ParseInt(rev, 10, 64)
	if err != nil {
		return id, -1
	}
	return id, r
}

// Config configures a Store.
type Config struct {
	// DB is the database, a bun.DB over pgx's stdlib driver.
	DB *bun.DB
	// HeartbeatDB, if set, carries the heartbeats (the replica's and the watchdogs'), so that a
	// pool full of work cannot starve them. Default DB.
	HeartbeatDB *bun.DB
	// WorkDB, if set, carries the claims, the recording of outcomes and the notifications, so that
	// callers queueing for DB (Start, Set and Get, a thousand a second) cannot starve the work
	// that answers them. Default DB.
	WorkDB *bun.DB
	// Schema holds the tables. Default "journey".
	Schema string
	// Graphs are the graphs this replica serves.
	Graphs []*graph.Graph
	// Clock feeds `coalesce(?, now())`. Default clock.Real.
	Clock clock.Clock
	// Logger receives the store's logs. Default slog.Default().
	Logger *slog.Logger
	// OnSave is called after a commit for each saved value and each final failure. It must not
	// block; the runtime hands the event to a goroutine of its own.
	OnSave func(g *graph.Graph, e graph.SaveEvent)
	// Handoff is told of each write that changes an execution's values, around its COMMIT.
	// Default: none.
	Handoff Handoff
	// Local, if set, takes the attempts that the callers' writes make ready, claimed for this
	// replica as they are made. Default: none; a claim takes them.
	Local Local
	// Hooks are test-only knobs.
	Hooks Hooks
	// LockTimeout bounds how long background work (sweeps, tick wake-ups, promotions) and the
	// recording of outcomes (Record) wait for a lock. Default 3s.
	LockTimeout time.Duration
	// Tracer makes the spans of the sweep's abandonments. Default: none.
	Tracer trace.Tracer
	// Routes are the deliveries this replica can make. Its heartbeat row lists them, and a claim
	// queues a delivery for every route of its event that any replica lists.
	Routes []Route
}

// Handoff is told of each write that changes the values of an execution, with the execution's
// revision after it: Committing before the COMMIT is sent, then Committed with the values as
// committed once it has succeeded, or Aborted if it failed. A write's NOTIFY of the change comes
// after its COMMIT, and may come before Committed. The calls must not block, and Committed must
// neither change values nor keep them.
//
// Aborted does not mean that nothing was committed: an error that ends the connection as the
// COMMIT is sent leaves the client not knowing, while the server may have committed, and sent
// the NOTIFY. Whoever waits on the change must look again.
type Handoff interface {
	Committing(id string, rev int64)
	Committed(id string, rev int64, values graph.Values)
	Aborted(id string, rev int64)
}

// Hooks are test-only knobs of a Store. The zero value changes nothing.
type Hooks struct {
	// Abandoning is called by a sweep inside the transaction that abandons c, once it holds the
	// computation's row and its execution's lock: where a process that freezes holds the most.
	Abandoning func(c *Computation)
	// Committed is called after the server has accepted a write's COMMIT, before the Handoff
	// hears of it, with the executions whose changes the write hands over. An error it returns is
	// taken for the COMMIT's, as when the connection breaks before the client reads the answer.
	Committed func(handed []string) error
}

// Store is the database layer of one replica.
type Store struct {
	db          *bun.DB
	hbdb        *bun.DB
	wdb         *bun.DB
	schema      string // raw name
	quoted      string // quoted identifier, substituted for {s} in queries
	channel     string
	graphs      map[string]*graph.Graph
	idle        map[string]bool // the graphs whose executions start idle (startsIdle), by GraphKey
	keys        []string
	paused      atomic.Pointer[map[string]bool] // the paused graph keys, as RefreshPaused last read them
	computed    [2][]string                     // the graph key and the name of each node served that is not an input
	clock       clock.Clock
	logger      *slog.Logger
	onSave      func(g *graph.Graph, e graph.SaveEvent)
	handoff     Handoff
	local       Local
	routes      []string // Route.String of each Config.Routes
	sweepLease  string
	promoteKey  string
	lockTimeout time.Duration
	hooks       Hooks
	abandoning  abandonFailures
	tracer      trace.Tracer
	notes       *notes
	// callers are the writes in applications' transactions that wait for their commit.
	callers *callerCommits
	// citus: the per-execution tables are distributed by lane (CheckRelease reads it). Citus
	// locks rows only in a statement pinned to one lane, so the statements that lock the rows of
	// several executions are sent once a lane (pinned, runEnd), where one PostgreSQL sends one.
	citus bool
	// deliverFrom turns the lane that a delivery on Citus looks in first.
	deliverFrom atomic.Int64
	// citusQueries are the statements as q writes them for Citus, by the text given.
	citusQueries sync.Map
	// afterCommits gathers the promotions after the writes' commits (promoteAfterCommit).
	afterCommits *afterCommits
	// rated are the served nodes with a rate limit, whose promotion reads their limits here.
	rated []ratedNode
	// archivedAfter is the id after which the next repair looks for archived executions with
	// waiting work (see sweepArchived).
	archivedAfter atomic.Pointer[string]
	// rateWake is when a full rate window has room again, in Unix nanoseconds (see RateWake).
	rateWake atomic.Int64
}

// New returns a Store. It does not touch the database.
func New(cfg Config) (*Store, error) {
	if cfg.DB == nil {
		return nil, errors.New("persistence: Config.DB is nil")
	}
	schema := cfg.Schema
	if schema == "" {
		schema = "journey"
	}
	s := &Store{
		db:          cfg.DB,
		hbdb:        cfg.HeartbeatDB,
		wdb:         cfg.WorkDB,
		schema:      schema,
		quoted:      pgx.Identifier{schema}.Sanitize(),
		channel:     channelName(schema),
		graphs:      make(map[string]*graph.Graph, len(cfg.Graphs)),
		idle:        make(map[string]bool, len(cfg.Graphs)),
		clock:       cfg.Clock,
		logger:      cfg.Logger,
		onSave:      cfg.OnSave,
		handoff:     cfg.Handoff,
		local:       cfg.Local,
		promoteKey:  "journey-promote:" + schema,
		lockTimeout: cmp.Or(cfg.LockTimeout, 3*time.Second),
		hooks:       cfg.Hooks,
		tracer:      cmp.Or[trace.Tracer](cfg.Tracer, telemetry.Disabled().Tracer),
		routes:      make([]string, 0, len(cfg.Routes)), // an empty array, not NULL, in the heartbeat
	}
	s.notes = newNotes(s)
	s.callers = newCallerCommits(s)
	s.afterCommits = newAfterCommits()
	if s.clock == nil {
		s.clock = clock.Real{}
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	for _, r := range cfg.Routes {
		s.routes = append(s.routes, r.String())
	}
	for _, g := range cfg.Graphs {
		key := GraphKey(g.Name(), g.Version())
		if _, dup := s.graphs[key]; dup {
			return nil, fmt.Errorf("persistence: graph %q version %q registered twice", g.Name(), g.Version())
		}
		s.graphs[key] = g
		s.idle[key] = machine.StartsIdle(g)
		s.keys = append(s.keys, key)
		s.rated = append(s.rated, ratedNodes(key, g)...)
		for _, n := range g.Nodes() {
			if n.Kind() != graph.KindInput {
				s.computed[0], s.computed[1] = append(s.computed[0], key), append(s.computed[1], n.Name())
			}
		}
	}
	// Replicas that serve the same graphs share a sweep lease; one that serves others sweeps them.
	sorted := slices.Sorted(slices.Values(s.keys))
	sum := sha256.Sum256([]byte(strings.Join(sorted, "\n")))
	s.sweepLease = "sweep:" + hex.EncodeToString(sum[:8])
	return s, nil
}

// SweepLease names the lease that single-flights the sweeps of this replica's graphs.
func (s *Store) SweepLease() string { return s.sweepLease }

// heartbeatDB is the database the heartbeats use.
func (s *Store) heartbeatDB() *bun.DB { return cmp.Or(s.hbdb, s.db) }

// workDB is the database the claims, the recording of outcomes and the notifications use.
func (s *Store) workDB() *bun.DB { return cmp.Or(s.wdb, s.db) }

// GraphKey identifies a graph version in the computations table.
func GraphKey(name, version string) string { return name + "@" + version }

// Channel is the LISTEN/NOTIFY channel of this schema.
func (s *Store) Channel() string { return s.channel }

// Schema is the schema holding the tables.
func (s *Store) Schema() string { return s.schema }

// DB is the underlying database.
func (s *Store) DB() *bun.DB { return s.db }

// Graph returns a served graph by name and version.
func (s *Store) Graph(name, version string) (*graph.Graph, bool) {
	g, ok := s.graphs[GraphKey(name, version)]
	return g, ok
}

// q substitutes the quoted schema for {s}.
func (s *Store) q(query string) string {
	query = strings.ReplaceAll(query, "{s}", s.quoted)
	if s.citus {
		if q, ok := s.citusQueries.Load(query); ok {
			return q.(string)
		}
		q := citusTimes.ReplaceAllString(query, "(SELECT $0)")
		q = citusDeadlines.ReplaceAllString(q, "(($1 AT TIME ZONE 'UTC') + $2 * interval '1 millisecond') AT TIME ZONE 'UTC'")
		s.citusQueries.Store(query, q)
		return q
	}
	return query
}

// Citus refuses, in a statement on its tables, a function that is not immutable in a COALESCE or
// a CASE, or with a column among its arguments in an UPDATE. On Citus, q writes the statements'
// times otherwise. citusTimes is the transaction's time, the stubbed clock's or the database's:
// Citus evaluates a scalar subquery of it first, and passes it on as a value. citusDeadlines is a
// time plus milliseconds, which timestamptz + interval adds with the time zone (a day's length
// depends on it), and timestamp + interval, in UTC, without.
var (
	citusTimes     = regexp.MustCompile(`coalesce\((\?|\$[0-9]+)::timestamptz, (now|statement_timestamp)\(\)\)`)
	citusDeadlines = regexp.MustCompile(`\b([a-z]+\.[a-z_]+) \+ ([a-z]+\.[a-z_]+) \* interval '1 millisecond'`)
)

// now is the time of the current transaction: the database's now(), or the stubbed clock.
func (s *Store) now(ctx context.Context, db bun.IDB) (time.Time, error) {
	var t time.Time
	err := db.NewRaw("SELECT coalesce(?::timestamptz, now())", s.clock.NowOrNil()).Scan(ctx, &t)
	return t, err
}

// notify queues a NOTIFY, delivered at commit.
func (s *Store) notify(ctx context.Context, tx bun.IDB, payload string) error {
	_, err := tx.NewRaw("SELECT pg_notify(?, ?)", s.channel, payload).Exec(ctx)
	return err
}

// boundLocks makes the rest of a background transaction give up on any lock it waits for longer
// than the store's lock timeout: a sweep, a wake-up or a promotion must not stall behind a frozen
// replica; it tries again at its next pass.
func (s *Store) boundLocks(ctx context.Context, tx bun.IDB) error {
	_, err := tx.NewRaw(s.lockTimeoutSQL()).Exec(ctx)
	if err != nil {
		return fmt.Errorf("setting the lock timeout: %w", err)
	}
	return nil
}

// readCommitted are the options of the store's transactions: READ COMMITTED, whatever the
// database's default_transaction_isolation says. The rules read what a write's lock made current
// (see load): under REPEATABLE READ, the read after the lock would see the snapshot of the
// transaction's first statement, taken before the lock was granted.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// inTx runs fn in a transaction.
func (s *Store) inTx(ctx context.Context, fn func(ctx context.Context, tx bun.Tx) error) error {
	return s.db.RunInTx(ctx, readCommitted, fn)
}

func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// GraphOf returns the graph and node a computation belongs to, if this replica serves it.
func (s *Store) GraphOf(c *Computation) (*graph.Graph, graph.Node, bool) {
	g, ok := s.graphs[c.GraphKey]
	if !ok {
		return nil, graph.Node{}, false
	}
	n, ok := g.Node(c.Node)
	return g, n, ok
}

// channelName is the NOTIFY channel of a schema. Channel names are identifiers, at most 63 bytes:
// a long schema name is shortened, with a hash of the whole name to keep it unique. It is cut
// between two characters: half of one would be invalid UTF-8, which LISTEN and NOTIFY refuse.
func channelName(schema string) string {
	name := "journey:" + schema
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(schema))
	return machine.Prefix(name, 50) + ":" + hex.EncodeToString(sum[:6])
}
