package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/migrate"
)

// placeholder is replaced, in every migration, by the quoted name of the target schema.
const placeholder = "{{schema}}"

// lockKeyPrefix prefixes the schema name in the key of the advisory lock, so that migrations of
// different schemas do not wait for each other.
const lockKeyPrefix = "journey-migrate:"

//go:embed sql/*.up.sql
var embedded embed.FS

// fileRE matches the name of a migration file: a number, an underscore, a lower-case name.
var fileRE = regexp.MustCompile(`^([0-9]+)_([a-z0-9_]+)\.up\.sql$`)

// source is one migration: the statements of file NNNN_comment.up.sql, with placeholders.
type source struct {
	number  string // "0001"
	comment string // "core"
	sql     string
}

// name is the migration's name as Migrate reports it: "0001_core".
func (s source) name() string { return s.number + "_" + s.comment }

// Migrate brings schema up to date with the embedded migrations. It creates the schema if needed
// and applies, in order, each migration not yet applied there, each in its own transaction. On a
// schema that is up to date, it only reads: no DDL and no lock.
// Bun's bookkeeping tables live in the schema too (<schema>.bun_migrations and
// <schema>.bun_migration_locks).
//
// The whole run holds an advisory lock, keyed by the schema name, in a transaction of its own:
// when several processes start together, one applies the migrations while the others wait, then
// find nothing left to do. It works through a transaction pooler too. db must allow at least two
// open connections.
//
// On a database with the citus extension, Migrate then distributes the per-execution tables by
// lane (see Distributed): those that are not yet.
//
// Migrate returns the names ("0001_core", ...) of the migrations this call applied, and "citus"
// if it distributed the tables: none if the schema was up to date. A migration that fails is rolled back and not marked as applied;
// Migrate returns the names of those applied before it, and the error. A nil logger discards
// the log.
func Migrate(ctx context.Context, db *bun.DB, schema string, logger *slog.Logger) ([]string, error) {
	sources, err := load(embedded)
	if err != nil {
		return nil, err
	}
	return run(ctx, db, schema, logger, sources)
}

// load reads the migrations in the sql directory of fsys, in order.
func load(fsys fs.FS) ([]source, error) {
	names, err := fs.Glob(fsys, "sql/*.up.sql")
	if err != nil {
		return nil, fmt.Errorf("listing migrations: %w", err)
	}
	seen := make(map[string]string)
	var sources []source
	for _, name := range names { // fs.Glob sorts its results
		base := path.Base(name)
		m := fileRE.FindStringSubmatch(base)
		if m == nil {
			return nil, fmt.Errorf("migration %s: the name must be NNNN_name.up.sql, with name in [a-z0-9_]", base)
		}
		if other, ok := seen[m[1]]; ok {
			return nil, fmt.Errorf("migrations %s and %s have the same number", other, base)
		}
		seen[m[1]] = base
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("reading migration %s: %w", base, err)
		}
		sources = append(sources, source{number: m[1], comment: m[2], sql: string(b)})
	}
	if len(sources) == 0 {
		return nil, errors.New("no migrations found")
	}
	return sources, nil
}

// run applies the migrations in sources to schema, as Migrate describes.
func run(ctx context.Context, db *bun.DB, schema string, logger *slog.Logger, sources []source) ([]string, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("service", "migrate", "schema", schema)
	if err := ValidSchema(schema); err != nil {
		return nil, fmt.Errorf("migrating: %w", err)
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	done, err := upToDate(ctx, db, schema, sources)
	if err != nil {
		return nil, err
	}
	if done {
		logger.Debug("schema is up to date")
		return nil, nil
	}
	began := time.Now()
	if db.DB.Stats().MaxOpenConnections == 1 {
		return nil, errors.New("migrating: the database allows one open connection, and migrating needs two " +
			"(one holds the migration lock): raise SetMaxOpenConns")
	}

	unlock, err := lock(ctx, db, schema, logger)
	if err != nil {
		return nil, err
	}
	defer unlock()

	if _, err := db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+quoted); err != nil {
		return nil, fmt.Errorf("creating schema %s: %w", schema, err)
	}

	ms := migrate.NewMigrations()
	for _, s := range sources {
		ms.Add(migrate.Migration{
			Name:    s.number,
			Comment: s.comment,
			Up:      up(s, quoted, logger),
		})
	}
	migrator := migrate.NewMigrator(db, ms,
		migrate.WithTableName(pgx.Identifier{schema, "bun_migrations"}.Sanitize()),
		migrate.WithLocksTableName(pgx.Identifier{schema, "bun_migration_locks"}.Sanitize()),
		migrate.WithMarkAppliedOnSuccess(true),
	)
	if err := migrator.Init(ctx); err != nil {
		return nil, fmt.Errorf("creating the migration tables in schema %s: %w", schema, err)
	}

	group, err := migrator.Migrate(ctx)
	var applied []string
	if group != nil {
		for _, m := range group.Migrations {
			if m.IsApplied() { // not the one that failed: bun lists it too, unmarked
				applied = append(applied, m.Name+"_"+m.Comment)
			}
		}
	}
	if err != nil {
		return applied, fmt.Errorf("migrating schema %s: %w", schema, err)
	}
	present, missing, err := citus(ctx, db, schema)
	if err != nil {
		return applied, fmt.Errorf("migrating schema %s: looking for Citus: %w", schema, err)
	}
	if present && len(missing) > 0 {
		distributing := time.Now()
		if err := distribute(ctx, db, schema, missing); err != nil {
			return applied, err
		}
		logger.Debug("distributed the tables by lane on Citus", "tables", missing, "elapsed", time.Since(distributing).Round(time.Millisecond))
		applied = append(applied, "citus")
	}
	if len(applied) == 0 {
		logger.Debug("schema is up to date")
	} else {
		// One line at INFO: each migration has its own at DEBUG.
		logger.Info("migrated", "applied", len(applied), "last", applied[len(applied)-1], "elapsed", time.Since(began).Round(time.Millisecond))
	}
	return applied, nil
}

// upToDate reports whether every migration of sources is applied to schema, with reads alone:
// then Migrate runs no DDL and takes no lock, so that a role with no right to create anything
// (see Grant) can start a replica on an up-to-date schema.
func upToDate(ctx context.Context, db *bun.DB, schema string, sources []source) (bool, error) {
	table := pgx.Identifier{schema, "bun_migrations"}.Sanitize()
	var exists bool
	if err := db.DB.QueryRowContext(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		return false, fmt.Errorf("migrating schema %s: looking for its migrations table: %w", schema, err)
	}
	if !exists {
		return false, nil
	}
	names := make([]string, len(sources))
	for i, src := range sources {
		names[i] = src.number
	}
	var applied int
	err := db.DB.QueryRowContext(ctx, "SELECT count(DISTINCT name) FROM "+table+" WHERE name = ANY($1)", names).Scan(&applied)
	if err != nil {
		return false, fmt.Errorf("migrating schema %s: reading its applied migrations: %w", schema, err)
	}
	if applied < len(names) {
		return false, nil
	}
	_, missing, err := citus(ctx, db, schema)
	if err != nil {
		return false, fmt.Errorf("migrating schema %s: looking for Citus: %w", schema, err)
	}
	return len(missing) == 0, nil
}

// Grant gives role what a replica, the CLI's commands and the dashboard need in schema, and no
// more: USAGE on the schema; SELECT, INSERT, UPDATE and DELETE on journey's tables; SELECT on
// the migrations' own tables, so that New finds the schema up to date; USAGE on the sequences.
// Not CREATE: the runtime runs no DDL on an up-to-date schema. The functions it calls are
// PostgreSQL's own, which every role may execute. Run it again after each migration, for the
// tables that one adds.
func Grant(ctx context.Context, db *bun.DB, schema, role string) error {
	if err := ValidSchema(schema); err != nil {
		return fmt.Errorf("granting: %w", err)
	}
	s, r := pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize()
	tx, err := db.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	for _, stmt := range []string{
		"GRANT USAGE ON SCHEMA " + s + " TO " + r,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + s + " TO " + r,
		"REVOKE INSERT, UPDATE, DELETE ON " + s + ".bun_migrations, " + s + ".bun_migration_locks FROM " + r,
		"GRANT USAGE ON ALL SEQUENCES IN SCHEMA " + s + " TO " + r,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("granting role %s what it needs in schema %s (%s): %w", role, schema, stmt, err)
		}
	}
	return tx.Commit()
}

// up returns the function that applies s: in one transaction, with search_path set to the
// schema so that an unqualified name cannot land elsewhere.
func up(s source, quotedSchema string, logger *slog.Logger) func(context.Context, *migrate.Migrator, *migrate.Migration) error {
	return func(ctx context.Context, m *migrate.Migrator, _ *migrate.Migration) error {
		began := time.Now()
		// The statements go to database/sql verbatim. Without arguments, pgx sends them in the
		// simple protocol, in which one Exec may hold many statements, whatever the query mode
		// of db.
		tx, err := m.DB().DB.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }() // a no-op after Commit
		if _, err := tx.ExecContext(ctx, "SET LOCAL search_path TO "+quotedSchema+", public"); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, strings.ReplaceAll(s.sql, placeholder, quotedSchema)); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		logger.Debug("applied migration", "migration", s.name(), "elapsed", time.Since(began).Round(time.Millisecond))
		return nil
	}
}

// lock takes the advisory lock of schema, waiting for it if another process holds it, in a
// transaction of its own that stays open until unlock ends it. A transaction-level lock, where a
// session-level one would not survive a transaction pooler: there, a session is one transaction
// long, and the lock would stay on a server connection that other clients share, while the
// unlock ran on another. The transaction waits idle while the migrations run on other
// connections, so the server's idle_in_transaction_session_timeout is lifted for it.
func lock(ctx context.Context, db *bun.DB, schema string, logger *slog.Logger) (unlock func(), err error) {
	tx, err := db.DB.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("migrating schema %s: opening the transaction of the migration lock: %w", schema, err)
	}
	key := lockKeyPrefix + schema
	const keyExpr = "hashtextextended($1, 0)"

	var locked bool
	err = tx.QueryRowContext(ctx, "SELECT set_config('idle_in_transaction_session_timeout', '0', true) IS NOT NULL "+
		"AND pg_try_advisory_xact_lock("+keyExpr+")", key).Scan(&locked)
	if err != nil {
		_ = tx.Rollback()
		return nil, fmt.Errorf("migrating schema %s: taking the migration lock: %w", schema, err)
	}
	if !locked {
		logger.Info("waiting for another process to finish migrating")
		began := time.Now()
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock("+keyExpr+")", key); err != nil {
			_ = tx.Rollback()
			return nil, fmt.Errorf("migrating schema %s: waiting for the migration lock: %w", schema, err)
		}
		logger.Debug("took the migration lock", "waited", time.Since(began).Round(time.Millisecond))
	}
	// The rollback ends the transaction, and with it the lock, even if ctx was cancelled; a
	// connection whose rollback fails is closed, which ends them too.
	return func() { _ = tx.Rollback() }, nil
}

// ValidSchema reports why schema cannot be the name of journey's schema, if it cannot.
func ValidSchema(schema string) error {
	switch {
	case schema == "":
		return errors.New("the schema name is empty")
	case len(schema) > 63:
		return fmt.Errorf("schema name %q is longer than PostgreSQL's 63 bytes: choose a shorter one", schema)
	case strings.ContainsAny(schema, "?\x00"):
		// bun reads ? in table names as placeholders.
		return fmt.Errorf("schema name %q contains ? or NUL: choose a name without them", schema)
	}
	return nil
}
