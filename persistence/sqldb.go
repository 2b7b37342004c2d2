package persistence

import (
	"context"
	"database/sql"
	"database/sql/driver"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// PlanSettings are the settings of the runtime's connections, unless its configuration sets them.
//
// The hot path's statements are prepared once per connection (pgx's default mode), and planned
// once too: plan_cache_mode=force_generic_plan. Custom plans would be planned again at each call,
// which cost more than the statements themselves: 40,077 plans for 3,001 executions, in journey
// bench -rate 300 (pg_stat_statements with track_planning).
//
// A generic plan lives as long as its connection, or until an ANALYZE of its tables. One made on
// a young table, before its first ANALYZE, sees a table of a few pages, and may read it whole
// (sequential scan, hash join) at every call as the table grows: in journey bench -rate 500 on a
// fresh schema, each Set's value insert took 1.1 ms, reading every execution. Every statement of
// the hot path reaches its rows through an index, so enable_seqscan=off rules that plan out. A
// table without a fitting index (the leases, the replica heartbeats: a few rows) is still read
// whole: the setting only makes that path look dear, and so lifts such a plan's cost over
// jit_above_cost. jit=off keeps PostgreSQL from compiling each of them at each call (in a profile
// of journey bench -rate 500, LLVM and the loading of its code): no statement of the runtime is
// long enough to gain from it.
//
// The hot path finds its rows by key: the executions, values and attempts of a batch, by
// = ANY($n) of an array, or one per row of a join. A generic plan takes such an array for ten
// rows, and reads them through a bitmap: it builds a bitmap of the index's matches, then reads
// the table's pages, and sorts the rows again when they must be locked in key order. A plain
// index scan reads the same pages, in the order the locks need. enable_bitmapscan=off: journey
// bench -n 40000, four runs of each alternated, 5,897 computations/s against 5,426, and 13% less
// time in PostgreSQL's statements per computation.
var PlanSettings = map[string]string{
	"plan_cache_mode":   "force_generic_plan",
	"enable_seqscan":    "off",
	"enable_bitmapscan": "off",
	"jit":               "off",
}

// OpenDB returns the database/sql pool on pool that a Store's bun.DB uses. bun writes its
// arguments into the statement's text, so its statements go over the simple protocol whatever the
// pool's mode: prepared, each would be prepared once and never run again. The statements that a
// txn sends through pgx itself keep the pool's mode: with pgx.QueryExecModeCacheStatement (pgx's
// default), each is prepared once per connection and planned once per connection and plan.
func OpenDB(pool *pgxpool.Pool) *sql.DB {
	db := sql.OpenDB(simpleConnector{stdlib.GetPoolConnector(pool)})
	db.SetMaxIdleConns(0) // as stdlib.OpenDBFromPool: the pgx pool keeps the idle connections
	return db
}

// simpleConnector hands out simpleConns.
type simpleConnector struct{ driver.Connector }

// Connect implements driver.Connector.
func (c simpleConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return simpleConn{dc.(*stdlibConn)}, nil
}

// stdlibConn names stdlib.Conn for embedding: as the embedded field's name, Conn would hide the
// Conn method that txn reaches the pgx connection by.
type stdlibConn = stdlib.Conn

// simpleConn is a stdlib connection whose database/sql statements use the simple protocol.
type simpleConn struct{ *stdlibConn }

// simpleProtocol, as the first argument, tells pgx to send the statement over the simple protocol.
var simpleProtocol = driver.NamedValue{Value: pgx.QueryExecModeSimpleProtocol}

// QueryContext implements driver.QueryerContext.
func (c simpleConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.stdlibConn.QueryContext(ctx, query, append([]driver.NamedValue{simpleProtocol}, args...))
}

// ExecContext implements driver.ExecerContext.
func (c simpleConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.stdlibConn.ExecContext(ctx, query, append([]driver.NamedValue{simpleProtocol}, args...))
}
