// Package pgtest gives tests a real PostgreSQL database, and each test its own schema.
//
// The database is TEST_DATABASE_URL, or else a throwaway cluster (see package devpg) that the
// test binary starts once, at the first need, and shares among its tests. A test package calls
// Main from TestMain, so that the cluster is stopped and removed when the tests end:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// or, to check for leaked goroutines as well:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Runner{M: m}) }
//
// Without Main, the cluster dies with the test binary, and a later start removes its directory.
// Tests then isolate themselves in schemas:
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		schema := pgtest.Schema(t) // dropped when the test ends
//		db := pgtest.BunDB(t, pgtest.URL(t))
//		...
//	}
//
// Package journeytest builds on it. This package imports devpg and nothing else from the
// project, so that any package can use it in its tests.
package pgtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/devpg"
)

const (
	// startTimeout bounds how long Main waits for a throwaway cluster.
	startTimeout = 2 * time.Minute
	// dropTimeout bounds how long a Schema cleanup waits to drop its schema.
	dropTimeout = 30 * time.Second
	// maxNameBytes is the part of a schema name taken from the test's name.
	maxNameBytes = 40
)

// TB is the part of testing.TB that this package uses. *testing.T, *testing.B and *testing.F
// have it.
type TB interface {
	Helper()
	Name() string
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// database is the database of this test binary, provided once by provide.
var database struct {
	mu       sync.Mutex
	provided bool
	url      string
	err      error          // why there is no database; every later call fails with it
	cluster  *devpg.Cluster // the throwaway cluster started for the test binary, if any
}

// provide returns the URL of the test binary's database: TEST_DATABASE_URL, or else a throwaway
// cluster, which the first call starts and the later ones share. Once it has failed, it fails
// with the same error.
func provide() (string, error) {
	database.mu.Lock()
	defer database.mu.Unlock()
	if database.provided {
		return database.url, database.err
	}
	database.provided = true
	if database.url = os.Getenv("TEST_DATABASE_URL"); database.url != "" {
		return database.url, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := devpg.Start(ctx, logger)
	if err != nil {
		database.err = fmt.Errorf("no database for the tests: set TEST_DATABASE_URL, or install the PostgreSQL server binaries: %w", err)
		return "", database.err
	}
	database.cluster, database.url = c, c.URL()
	return database.url, nil
}

// stop stops the throwaway cluster, if one was started, and forgets the database.
func stop() error {
	database.mu.Lock()
	defer database.mu.Unlock()
	c := database.cluster
	database.provided, database.url, database.err, database.cluster = false, "", nil, nil
	if c == nil {
		return nil
	}
	return c.Stop()
}

// Main is for TestMain. It provides the database (TEST_DATABASE_URL, or else a throwaway cluster
// for this test binary), runs the tests, stops the cluster, and exits with m.Run's code.
func Main(m *testing.M) {
	os.Exit(Runner{M: m}.Run())
}

// Runner does what Main does but returns the exit code instead of exiting, for wrappers that
// take a Run method, such as goleak.VerifyTestMain(pgtest.Runner{M: m}).
type Runner struct {
	// M runs the tests.
	M *testing.M
}

// Run provides the database, runs the tests and stops the cluster, if one was started. It
// returns m.Run's code, or 1 if no database could be had.
func (r Runner) Run() int {
	if _, err := provide(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		return 1
	}
	defer func() {
		if err := stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping the test cluster: %v\n", err)
		}
	}()
	return r.M.Run()
}

// URL returns the URL of the test database, providing it at the first call. It fails the test if
// there is none.
func URL(tb TB) string {
	tb.Helper()
	url, err := provide()
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return url
}

// BaseURL returns the URL of the test database, providing it at the first call, or "" if there
// is none. It is for code that has no testing.TB, such as Example functions.
func BaseURL() string {
	url, _ := provide()
	return url
}

// Schema returns a fresh, unique schema name, such as "jt_testfoo_bar_1a2b3c4d": at most 63
// bytes of [a-z0-9_]. It creates nothing, but registers a cleanup that drops the schema, if it
// exists, with everything in it.
func Schema(tb TB) string {
	tb.Helper()
	url := URL(tb)
	schema := schemaName(tb.Name())
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
		defer cancel()
		if err := dropSchema(ctx, url, schema); err != nil {
			tb.Errorf("pgtest: dropping schema %s (is a connection still holding locks in it?): %v", schema, err)
		}
	})
	return schema
}

// SkipOnCitus skips a test whose subject is one PostgreSQL's, when the test database loads Citus
// (make test-citus): why says what differs there.
func SkipOnCitus(tb testing.TB, why string) {
	tb.Helper()
	if Citus(tb) {
		tb.Skip("on Citus, " + why)
	}
}

// Citus reports whether the test database loads Citus.
func Citus(tb testing.TB) bool {
	tb.Helper()
	citus.once.Do(func() {
		db := openDB(tb, URL(tb))
		citus.err = db.QueryRowContext(context.Background(), `SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')`).Scan(&citus.loaded)
	})
	if citus.err != nil {
		tb.Fatalf("pgtest: looking for Citus: %v", citus.err)
	}
	return citus.loaded
}

// citus is whether the test database loads Citus, as SkipOnCitus found once.
var citus struct {
	once   sync.Once
	loaded bool
	err    error
}

// DB returns a *sql.DB on the test database through pgx's database/sql driver, in the simple
// query protocol. It is closed when the test ends.
func DB(tb testing.TB) *sql.DB {
	tb.Helper()
	return openDB(tb, URL(tb))
}

// BunDB returns a *bun.DB on url through pgx's database/sql driver, in the simple query
// protocol, with the PostgreSQL dialect. It is closed when the test ends.
func BunDB(tb testing.TB, url string) *bun.DB {
	tb.Helper()
	db := bun.NewDB(openDB(tb, url), pgdialect.New())
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

func openDB(tb testing.TB, url string) *sql.DB {
	tb.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		tb.Fatalf("pgtest: parsing the database URL: %v", err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	db := stdlib.OpenDB(*cfg)
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// schemaName turns a test name into a unique schema name: "jt_", the name lower-cased with
// runs of other characters turned into one "_" and cut to maxNameBytes, "_", and 8 random hex
// digits.
func schemaName(testName string) string {
	var b strings.Builder
	b.WriteString("jt_")
	underscore := true // no "_" right after the prefix
	for _, r := range strings.ToLower(testName) {
		if b.Len()-len("jt_") >= maxNameBytes {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			underscore = false
		} else if !underscore {
			b.WriteByte('_')
			underscore = true
		}
	}
	if !underscore {
		b.WriteByte('_')
	}
	var random [4]byte
	_, _ = rand.Read(random[:]) // never fails
	b.WriteString(hex.EncodeToString(random[:]))
	return b.String()
}

// dropSchema drops schema, with everything in it.
//
// A statement that a test canceled as it ended may still run for a moment, until its backend
// reads the cancel request: on a busy machine, long enough to wait for a lock that the DROP took
// while the DROP waits for one that it holds. PostgreSQL then ends the DROP as a deadlock, and the
// DROP is tried again, a few times.
func dropSchema(ctx context.Context, url, schema string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	for try := 1; ; try++ {
		_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		var pgErr *pgconn.PgError
		if try == dropTries || !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// dropTries is how many times a schema's DROP is tried when it deadlocks.
const dropTries = 5

// Cluster starts a PostgreSQL cluster for this test alone and stops it when the test ends, for
// tests that restart or stop the server. Most tests want Schema instead. The test is skipped if
// the PostgreSQL server binaries are not installed.
func Cluster(tb testing.TB) *devpg.Cluster {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := devpg.Start(ctx, slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if errors.Is(err, devpg.ErrNoBinaries) {
		tb.Skip(err)
	}
	if err != nil {
		tb.Fatalf("pgtest: starting a cluster: %v", err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Errorf("pgtest: stopping the cluster: %v", err)
		}
	})
	return c
}

// Pooler is a PgBouncer in transaction pooling mode for a test to run through.
type Pooler struct {
	// Name names it in a subtest: "debian" or "modern".
	Name string
	// Start starts it for the test and returns its URL: Bouncer or ModernBouncer.
	Start func(testing.TB) string
}

// Poolers are the PgBouncers that the tests behind a pooler run through, each in a subtest:
// Debian's, where a statement prepared by name does not outlive its transaction (Bouncer), and
// one that keeps prepared statements (ModernBouncer).
var Poolers = []Pooler{{"debian", Bouncer}, {"modern", ModernBouncer}}

// Bouncer starts a PgBouncer in transaction pooling mode in front of the test database, for this
// test alone (devpg.StartBouncer: Debian's, PgBouncer 1.18 in Debian 12, unless another is on
// PATH), and returns its URL; it is stopped when the test ends. It fails the test if pgbouncer is
// not installed, unless JOURNEY_SKIP_POOLER=1, which skips it.
func Bouncer(tb testing.TB) string {
	tb.Helper()
	return startBouncer(tb, devpg.BouncerConfig{})
}

// ModernBouncer starts a PgBouncer that keeps prepared statements (1.21 or later, with
// max_prepared_statements = 200) in transaction pooling mode in front of the test database, for
// this test alone, and returns its URL with default_query_exec_mode=cache_statement: pgx's
// default mode, which prepares each statement by name, as a DatabaseURL behind such a pooler asks
// for. It is stopped when the test ends. The program is ModernBouncerProgram's.
func ModernBouncer(tb testing.TB) string {
	tb.Helper()
	cfg := devpg.BouncerConfig{Program: ModernBouncerProgram(tb), MaxPreparedStatements: modernPreparedStatements}
	u, err := url.Parse(startBouncer(tb, cfg))
	if err != nil {
		tb.Fatalf("pgtest: parsing pgbouncer's URL: %v", err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", "cache_statement")
	u.RawQuery = q.Encode()
	return u.String()
}

// modernPreparedStatements is ModernBouncer's max_prepared_statements: PgBouncer's default from
// 1.24 on, and more than the runtime prepares.
const modernPreparedStatements = 200

// ModernBouncerProgram returns the path of a PgBouncer 1.21 or later: $JOURNEY_PGBOUNCER, or else
// the one that make pgbouncer builds into .tools/pgbouncer at the module's root. Without either,
// it fails the test, unless JOURNEY_SKIP_POOLER=1, which skips it; and it fails the test if the
// program is older than 1.21.
func ModernBouncerProgram(tb testing.TB) string {
	tb.Helper()
	program := cmp.Or(os.Getenv("JOURNEY_PGBOUNCER"), builtBouncer())
	if program == "" {
		msg := "pgtest: no PgBouncer 1.21 or later for the tests behind a pooler that keeps prepared statements: " +
			"run make pgbouncer, which builds one into .tools/pgbouncer, or set JOURNEY_PGBOUNCER to one " +
			"(or set JOURNEY_SKIP_POOLER=1 to skip the tests behind a pooler)"
		if os.Getenv("JOURNEY_SKIP_POOLER") == "1" {
			tb.Skip(msg)
		}
		tb.Fatalf("%s", msg)
	}
	version, prepares, err := devpg.BouncerVersion(context.Background(), program)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	if !prepares {
		tb.Fatalf("pgtest: %s is PgBouncer %s, which cannot keep prepared statements: the tests need 1.21 or later "+
			"(make pgbouncer builds one into .tools/pgbouncer)", program, version)
	}
	return program
}

// builtBouncer returns the pgbouncer that make pgbouncer builds, in .tools/pgbouncer at the root
// of the module (the nearest directory with a go.mod, from the test's up), or "" if there is none.
func builtBouncer() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			program := filepath.Join(dir, ".tools", "pgbouncer", "bin", "pgbouncer")
			if _, err := os.Stat(program); err != nil {
				return ""
			}
			return program
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

func startBouncer(tb testing.TB, cfg devpg.BouncerConfig) string {
	tb.Helper()
	upstream := URL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	b, err := devpg.StartBouncerWith(ctx, upstream, cfg)
	if errors.Is(err, devpg.ErrNoBouncer) && os.Getenv("JOURNEY_SKIP_POOLER") == "1" {
		tb.Skip(err)
	}
	if err != nil {
		tb.Fatalf("pgtest: starting pgbouncer (or set JOURNEY_SKIP_POOLER=1 to skip the tests behind it): %v", err)
	}
	tb.Cleanup(func() {
		if err := b.Stop(); err != nil {
			tb.Errorf("pgtest: stopping pgbouncer: %v", err)
		}
	})
	return b.URL()
}

// Poll waits until cond holds, looking again every interval, and reports whether it did before
// timeout passed. It is for state that nothing announces, such as a row that another process
// writes; a test with a signal to wait on waits on it instead.
func Poll(timeout, every time.Duration, cond func() bool) bool {
	expired := time.After(timeout)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for !cond() {
		select {
		case <-expired:
			return false
		case <-tick.C:
		}
	}
	return true
}
