// Package exampletest runs an example's program in its test: against the database at
// TEST_DATABASE_URL, or else DATABASE_URL, or else a throwaway PostgreSQL cluster (package devpg),
// in a fresh schema that it drops when the test ends.
package exampletest

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/devpg"
)

// timeout bounds a program's run, and the cleanup of its schema.
const timeout = 2 * time.Minute

// Program is an example's run function: it works in schema, in the database at databaseURL,
// and prints what it shows to out.
type Program func(ctx context.Context, out io.Writer, logger *slog.Logger, databaseURL, schema string) error

// Run runs program in a fresh schema and returns the lines it printed. It fails the test, with
// the output so far, if program returns an error.
func Run(t *testing.T, program Program) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	url := database(t, logger)
	schema := "example_" + strings.ToLower(rand.Text())
	t.Cleanup(func() { dropSchema(t, url, schema) })

	var out bytes.Buffer
	err := program(ctx, &out, logger, url, schema)
	require.NoError(t, err, "the program failed; it printed:\n%s", out.String())
	return strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
}

// database returns TEST_DATABASE_URL, or what devpg.URLOrStart gives: DATABASE_URL, or a
// throwaway cluster that is stopped when the test ends.
func database(t *testing.T, logger *slog.Logger) string {
	t.Helper()
	if url := os.Getenv("TEST_DATABASE_URL"); url != "" {
		return url
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	url, stop, err := devpg.URLOrStart(ctx, logger)
	require.NoError(t, err, "no database for the test: set TEST_DATABASE_URL, or install the PostgreSQL server binaries")
	t.Cleanup(stop)
	return url
}

// dropSchema drops the program's schema.
func dropSchema(t *testing.T, url, schema string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err, "connecting to drop schema %s", schema)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	require.NoError(t, err, "dropping schema %s", schema)
}
