// Package migrations creates and upgrades journey's tables in a PostgreSQL schema.
//
// journey.New migrates its schema itself, unless Config.SkipMigrations is set: most
// applications never call this package. It is for deployments that migrate in a step of their
// own, before the replicas start, and for tools that read journey's tables without a runtime.
//
// # Migrate
//
// Migrate creates the schema if needed and applies the migrations not yet applied there, each
// in its own transaction. Any number of processes may call it at once:
//
//	cfg, err := pgx.ParseConfig(os.Getenv("DATABASE_URL"))
//	if err != nil {
//		return err
//	}
//	db := bun.NewDB(stdlib.OpenDB(*cfg), pgdialect.New())
//	applied, err := migrations.Migrate(ctx, db, "journey", logger)
//	if err != nil {
//		return fmt.Errorf("migrating the database: %w", err)
//	}
//
// applied names the migrations this call applied, such as "0001_core": none if the schema was
// up to date. Migrate serialises concurrent callers with a PostgreSQL advisory lock, so exactly
// one of them applies what is pending and the others wait for it, then find the schema up to
// date (Bun's own lock does not wait, so on its own it would make the other replicas fail).
// The lock holds a connection of its own: db must allow at least two. ValidSchema says why a
// schema name cannot be used, before anything is created.
//
// From the command line:
//
//	go run ./cmd/journey migrate -schema journey
//
// # The migration files
//
// The migrations are the files sql/NNNN_name.up.sql, embedded in the binary and applied in
// order of their number by bun/migrate. In each file, {{schema}} stands for the quoted name of
// the target schema, so one database can hold many independent journey schemas (one per test,
// say). A migration, once released, is never edited: a change is a new file.
//
// This package holds the only SQL outside persistence: the migration files, and the
// locking and schema creation around them. It imports nothing else from the project.
package migrations
