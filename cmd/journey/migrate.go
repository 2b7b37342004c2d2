package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/migrations"
)

const migrateDescription = `migrate creates the schema if needed and applies the pending migrations to the database at
$DATABASE_URL. Several processes may run it at once: one migrates, the others wait for it.`

// runMigrate implements "journey migrate".
func runMigrate(ctx context.Context, env *environment, args []string) int {
	fs := newFlagSet(env, "migrate", "[-schema name] [-timeout duration]", migrateDescription)
	schema := fs.String("schema", "journey", "the PostgreSQL `schema` that holds journey's tables")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long, waiting for the lock included")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.stderr, "journey migrate: unexpected arguments %q\n", fs.Args())
		return 2
	}
	url := env.getenv("DATABASE_URL")
	if url == "" {
		fmt.Fprintln(env.stderr, "journey migrate: DATABASE_URL is not set: set it to the database to migrate, "+
			"or run `journey dev` for a throwaway one")
		return 2
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	db, err := openDB(url)
	if err != nil {
		fmt.Fprintf(env.stderr, "journey migrate: %v\n", err)
		return 1
	}
	defer db.Close()

	applied, err := migrations.Migrate(ctx, db, *schema, env.logger)
	if err != nil {
		fmt.Fprintf(env.stderr, "journey migrate: %v\n", err)
		return 1
	}
	if len(applied) == 0 {
		fmt.Fprintf(env.stdout, "schema %s is up to date\n", *schema)
		return 0
	}
	for _, name := range applied {
		fmt.Fprintf(env.stdout, "applied %s\n", name)
	}
	return 0
}

// openDB opens a *bun.DB on url through pgx's database/sql driver, in the simple protocol.
func openDB(url string) (*bun.DB, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parsing DATABASE_URL: %w", err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return bun.NewDB(stdlib.OpenDB(*cfg), pgdialect.New()), nil
}
