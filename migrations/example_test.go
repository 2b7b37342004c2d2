package migrations_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/migrations"
)

func ExampleMigrate() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// An application passes its own database URL, and usually the schema "journey".
	url, schema, dropSchema := pgtest.ExampleSchema("ExampleMigrate")
	defer dropSchema()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		fmt.Println(err)
		return
	}
	db := bun.NewDB(stdlib.OpenDB(*cfg), pgdialect.New())
	defer db.Close()

	// The first run creates the schema and applies every migration, in order.
	applied, err := migrations.Migrate(ctx, db, schema, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("first run, first migration:", applied[0])

	// Any later run, by this replica or another, finds nothing left to do.
	applied, err = migrations.Migrate(ctx, db, schema, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("second run, migrations applied:", len(applied))
	// Output:
	// first run, first migration: 0001_core
	// second run, migrations applied: 0
}

func ExampleValidSchema() {
	fmt.Println(migrations.ValidSchema("journey"))
	fmt.Println(migrations.ValidSchema("what?"))
	// Output:
	// <nil>
	// schema name "what?" contains ? or NUL: choose a name without them
}
