package pgtest

import (
	"context"
	"fmt"
)

// ExampleSchema is Schema for Example functions, which get no testing.TB: it returns the test
// database's URL, a fresh schema name made from name, and a function that drops the schema, to
// defer. The drop prints its error, if any, to standard output, so that the example's output
// no longer matches and the example fails. ExampleSchema panics if there is no test database.
func ExampleSchema(name string) (url, schema string, drop func()) {
	url = BaseURL()
	if url == "" {
		panic("pgtest: no test database: set TEST_DATABASE_URL, or install the PostgreSQL server binaries")
	}
	schema = schemaName(name)
	return url, schema, func() {
		ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
		defer cancel()
		if err := dropSchema(ctx, url, schema); err != nil {
			fmt.Printf("pgtest: dropping schema %s: %v\n", schema, err)
		}
	}
}
