package migrations

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
)

// Distributed are the tables that hold an execution's rows, each keyed by lane first. On a
// database with the citus extension, Migrate distributes them by lane, co-located with
// executions: an execution's rows, and a keyed Start's key, are on one shard. The other tables
// (replicas, graph versions, leases, insights, schedules, the migrations' own) are small, shared,
// and locked with FOR UPDATE SKIP LOCKED, which Citus's reference tables do not honour: they stay
// on the coordinator as plain tables, and the runtime never joins them with the distributed ones.
// A table that a later release adds here is distributed by the first Migrate of that release.
var Distributed = []string{"executions", "nodes", "attempts", "value_history", "notification_claims",
	"notification_deliveries", "requests", "map_progress"}

// citus reports whether the database has the citus extension, and which tables of Distributed
// are not distributed yet in schema, in Distributed's order.
func citus(ctx context.Context, db *bun.DB, schema string) (present bool, missing []string, err error) {
	err = db.DB.QueryRowContext(ctx, `SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')`).Scan(&present)
	if err != nil || !present {
		return present, nil, err
	}
	rows, err := db.DB.QueryContext(ctx, `SELECT t FROM unnest($1::text[]) WITH ORDINALITY AS d(t, i)
		WHERE NOT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = to_regclass(quote_ident($2) || '.' || quote_ident(t)))
		ORDER BY i`, Distributed, schema)
	if err != nil {
		return present, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var table string
		if err := rows.Scan(&table); err != nil {
			return present, nil, err
		}
		missing = append(missing, table)
	}
	return present, missing, rows.Err()
}

// distribute makes tables, of Distributed, distributed tables of Citus in schema, by lane and
// co-located with executions, with as many shards as citus.shard_count says. Citus wants every
// unique index of a distributed table to include its distribution column: the key of an
// execution, unique per graph across lanes on one PostgreSQL, is unique per lane here, which a
// keyed Start's lane (that of its key) makes the same.
func distribute(ctx context.Context, db *bun.DB, schema string, tables []string) error {
	s := pgx.Identifier{schema}.Sanitize()
	var stmts []string
	if slices.Contains(tables, Distributed[0]) {
		stmts = append(stmts, `DROP INDEX `+s+`.executions_key_idx`,
			`CREATE UNIQUE INDEX executions_key_idx ON `+s+`.executions (lane, key, graph_name)
			WHERE key IS NOT NULL AND archived_at IS NULL`)
	}
	for _, table := range tables {
		colocate := "none"
		if table != Distributed[0] {
			colocate = pgx.Identifier{schema, Distributed[0]}.Sanitize()
		}
		stmts = append(stmts, fmt.Sprintf(`SELECT create_distributed_table('%s.%s', 'lane', colocate_with => '%s')`,
			s, pgx.Identifier{table}.Sanitize(), colocate))
	}
	tx, err := db.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	for _, stmt := range stmts {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("distributing schema %s on Citus (%s): %w", schema, stmt, err)
		}
	}
	return tx.Commit()
}
