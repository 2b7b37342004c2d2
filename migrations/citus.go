package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
)

// Distributed are the tables that hold an execution's rows, each keyed by lane first. On a
// database with the citus extension, Migrate distributes them by lane, co-located with
// executions: an execution's rows, and a keyed Start's key, are on one shard. The other tables
// (replicas, graph versions, leases, insights, the migrations' own) are small, shared, and locked
// with FOR UPDATE SKIP LOCKED, which Citus's reference tables do not honour: they stay on the
// coordinator as plain tables, and the runtime never joins them with the distributed ones.
var Distributed = []string{"executions", "nodes", "attempts", "value_history", "notification_claims",
	"notification_deliveries", "requests"}

// citus reports whether the database has the citus extension, and whether schema's executions
// table is distributed already.
func citus(ctx context.Context, db *bun.DB, schema string) (present, distributed bool, err error) {
	err = db.DB.QueryRowContext(ctx, `SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')`).Scan(&present)
	if err != nil || !present {
		return present, false, err
	}
	err = db.DB.QueryRowContext(ctx, `SELECT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = to_regclass($1))`,
		pgx.Identifier{schema, "executions"}.Sanitize()).Scan(&distributed)
	return present, distributed, err
}

// distribute makes schema's per-execution tables distributed tables of Citus, by lane and
// co-located, with as many shards as citus.shard_count says. Citus wants every unique index of a
// distributed table to include its distribution column: the key of an execution, unique per
// graph across lanes on one PostgreSQL, is unique per lane here, which a keyed Start's lane (that
// of its key) makes the same.
func distribute(ctx context.Context, db *bun.DB, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	stmts := []string{
		`DROP INDEX ` + s + `.executions_key_idx`,
		`CREATE UNIQUE INDEX executions_key_idx ON ` + s + `.executions (lane, key, graph_name)
			WHERE key IS NOT NULL AND archived_at IS NULL`,
	}
	for i, table := range Distributed {
		colocate := "none"
		if i > 0 {
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
