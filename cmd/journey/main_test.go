package main

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/journey-go/journey/internal/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.Runner{M: m})
}

// runJourney runs a command line and returns its exit code, standard output and standard error.
func runJourney(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runAs(t, os.Getenv("DATABASE_URL"), args...)
}

// runAs runs a journey command with DATABASE_URL set to dbURL; its log goes to the test's.
func runAs(t *testing.T, dbURL string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := &environment{stdout: &stdout, stderr: &stderr, logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
		getenv: func(name string) string {
			if name == "DATABASE_URL" {
				return dbURL
			}
			return os.Getenv(name)
		}}
	code := run(t.Context(), env, args)
	return code, stdout.String(), stderr.String()
}

func TestUsage(t *testing.T) {
	code, _, stderr := runJourney(t, "-h")
	require.Equal(t, 0, code)
	require.Contains(t, stderr, "journey dev -- go test ./...")

	code, _, stderr = runJourney(t)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "Commands:")

	code, _, stderr = runJourney(t, "nope")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `unknown command "nope"`)

	code, _, _ = runJourney(t, "dev", "-bogus")
	require.Equal(t, 2, code)
}

func TestDevRunsCommandAgainstItsCluster(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("TEST_DATABASE_URL", "")
	code, stdout, _ := runJourney(t, "dev", "--", "sh", "-c",
		`echo "$DATABASE_URL"; test "$DATABASE_URL" = "$TEST_DATABASE_URL" && exit 5`)
	require.Equal(t, 5, code, "dev exits with the command's code")
	require.Regexp(t, `^postgres://postgres@127\.0\.0\.1:\d+/postgres\?sslmode=disable\n$`, stdout)
}

func TestDevUsesDatabaseURL(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://example.invalid/db")
	code, stdout, _ := runJourney(t, "dev", "--", "sh", "-c", `echo "$DATABASE_URL"`)
	require.Equal(t, 0, code)
	require.Equal(t, "postgres://example.invalid/db\n", stdout)

	code, _, stderr := runJourney(t, "dev", "--", "/no/such/command")
	require.Equal(t, 127, code)
	require.Contains(t, stderr, "no such file")

	code, _, _ = runJourney(t, "dev", "--", "sh", "-c", "kill -TERM $$")
	require.Equal(t, 143, code, "a command killed by a signal exits with 128+signal, as in a shell")
}

func TestMigrate(t *testing.T) {
	schema := pgtest.Schema(t)
	t.Setenv("DATABASE_URL", pgtest.URL(t))
	code, stdout, stderr := runJourney(t, "migrate", "-schema", schema)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "applied 0001_core\n")

	code, stdout, _ = runJourney(t, "migrate", "-schema", schema)
	require.Equal(t, 0, code)
	require.Equal(t, "schema "+schema+" is up to date\n", stdout)

	t.Setenv("DATABASE_URL", "")
	code, _, stderr = runJourney(t, "migrate")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "DATABASE_URL is not set")
}

// Through PgBouncer in transaction mode, migrate works, and three at once still apply each
// migration once: its lock lives in a transaction, which the pooler keeps on one server
// connection, where a session's lock would be left behind on a connection others share.
func TestMigrateThroughAPooler(t *testing.T) {
	for _, pooler := range pgtest.Poolers {
		t.Run(pooler.Name, func(t *testing.T) {
			schema, bouncer := pgtest.Schema(t), pooler.Start(t)
			migrate := func() (int, string, string) { return runAs(t, bouncer, "migrate", "-schema", schema) }
			outs := make(chan string, 3)
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					code, stdout, stderr := migrate()
					assert.Equal(t, 0, code, stderr)
					outs <- stdout
				})
			}
			wg.Wait()
			close(outs)
			applied := 0
			for out := range outs {
				if strings.Contains(out, "applied 0001_core\n") {
					applied++
				} else {
					assert.Equal(t, "schema "+schema+" is up to date\n", out)
				}
			}
			require.Equal(t, 1, applied, "one run applied the migrations, the others found them done")
			code, stdout, stderr := migrate()
			require.Equal(t, 0, code, stderr)
			require.Equal(t, "schema "+schema+" is up to date\n", stdout, "no lock was left behind")
		})
	}
}
