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
	"github.com/journey-go/journey/persistence"
)

const migrateDescription = `migrate creates the schema if needed and applies the pending migrations to the database at
$DATABASE_URL. Several processes may run it at once: one migrates, the others wait for it.

Run it as the role that owns the schema. With -grant ROLE, it then gives ROLE, the role the
replicas connect as, what they need and no more: USAGE on the schema, SELECT, INSERT, UPDATE
and DELETE on journey's tables, SELECT on the migrations' tables, USAGE on the sequences; not
CREATE. A replica as that role migrates nothing: start it once the schema is up to date. Run
migrate -grant again after each upgrade, for the tables a migration adds.`

// runMigrate implements "journey migrate".
func runMigrate(ctx context.Context, env *environment, args []string) int {
	fs := newFlagSet(env, "migrate", "[-schema name] [-grant role] [-timeout duration]", migrateDescription)
	schema := fs.String("schema", "journey", "the PostgreSQL `schema` that holds journey's tables")
	grant := fs.String("grant", "", "then grant `role` what the replicas, the CLI and the dashboard need (its exact name)")
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
	}
	for _, name := range applied {
		fmt.Fprintf(env.stdout, "applied %s\n", name)
	}
	if *grant != "" {
		if err := persistence.CheckText("-grant", *grant); err != nil {
			fmt.Fprintf(env.stderr, "journey migrate: %v\n", err)
			return 2
		}
		if err := migrations.Grant(ctx, db, *schema, *grant); err != nil {
			fmt.Fprintf(env.stderr, "journey migrate: %v\n", err)
			return 1
		}
		fmt.Fprintf(env.stdout, "granted role %s what the replicas need in schema %s\n", *grant, *schema)
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
