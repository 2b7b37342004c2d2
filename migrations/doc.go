// Package migrations creates and upgrades journey's tables in a PostgreSQL schema.
//
// The migrations are the files sql/NNNN_name.up.sql, embedded in the binary and applied in
// order of their number by bun/migrate. In each file, {{schema}} stands for the quoted name of
// the target schema, so one database can hold many independent journey schemas (one per test,
// say). A migration, once released, is never edited: a change is a new file.
//
// Every replica may call Migrate when it starts:
//
//	db := bun.NewDB(stdlib.OpenDB(*cfg), pgdialect.New())
//	applied, err := migrations.Migrate(ctx, db, "journey", logger)
//	if err != nil {
//		return fmt.Errorf("migrating the database: %w", err)
//	}
//
// Migrate serialises concurrent callers with a PostgreSQL advisory lock, so exactly one of them
// applies what is pending and the others wait for it, then find the schema up to date. Bun's own
// Lock does not wait, so on its own it would make the other replicas fail.
//
// From the command line: go run ./cmd/journey migrate -schema journey.
//
// This package holds the only SQL outside package persistence: the migration files, and the
// locking and schema creation around them. It imports nothing else from the project.
package migrations
