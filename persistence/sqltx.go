package persistence

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// A write in a *sql.Tx of the application's (see inCaller) sends its statements one at a time,
// through database/sql, with each array written as the text of an array literal: whatever the
// driver (pgx's stdlib, lib/pq, bun's pgdriver), the statements' casts ($1::text[]) read it. The
// steps' reads get their results through sqlResults, a pgx.BatchResults.

// sendSQL sends steps in tx, one after the other.
func sendSQL(ctx context.Context, tx *sql.Tx, steps []step) error {
	return readEach(steps, &sqlResults{ctx: ctx, tx: tx, steps: steps})
}

// textArgs returns args as driver values that any driver sends: a column (see columns) as the
// text of its array, each pgtype value as what it is.
func textArgs(args []any) ([]any, error) {
	out := slices.Clone(columns(args))
	for i, a := range out {
		if v, ok := a.(driver.Valuer); ok {
			var err error
			if out[i], err = v.Value(); err != nil {
				return nil, fmt.Errorf("persistence: writing an argument of type %T: %w", a, err)
			}
		}
	}
	return out, nil
}

// sqlResults are the results of steps in a *sql.Tx, as a pgx.BatchResults: each step runs when
// its result is asked for, in order.
type sqlResults struct {
	ctx   context.Context
	tx    *sql.Tx
	steps []step
	next  int
}

// step returns the statement of the next step and its arguments.
func (r *sqlResults) step() (string, []any, error) {
	if r.next == len(r.steps) {
		return "", nil, errors.New("persistence: a result asked for beyond the steps sent")
	}
	st := r.steps[r.next]
	r.next++
	args, err := textArgs(st.args)
	return st.sql, args, err
}

func (r *sqlResults) Exec() (pgconn.CommandTag, error) {
	query, args, err := r.step()
	if err == nil {
		_, err = r.tx.ExecContext(r.ctx, query, args...)
	}
	return pgconn.CommandTag{}, err
}

func (r *sqlResults) Query() (pgx.Rows, error) {
	query, args, err := r.step()
	if err != nil {
		return nil, err
	}
	rows, err := r.tx.QueryContext(r.ctx, query, args...) //nolint:rowserrcheck // sqlRows.Err reads it
	if err != nil {
		return nil, err
	}
	cols, err := rows.Columns()
	fields := make([]pgconn.FieldDescription, len(cols))
	for i, c := range cols {
		fields[i].Name = c
	}
	return &sqlRows{rows: rows, fields: fields, err: err}, nil // the caller closes it
}

func (r *sqlResults) QueryRow() pgx.Row {
	rows, err := r.Query()
	return sqlRow{rows, err}
}

func (r *sqlResults) Close() error { return nil }
func (r *sqlResults) Tx() pgx.Tx   { return nil }

// sqlRow is the first row of a result, as a pgx.Row.
type sqlRow struct {
	rows pgx.Rows
	err  error
}

func (r sqlRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		return cmpOrErr(r.rows.Err(), pgx.ErrNoRows)
	}
	return r.rows.Scan(dest...)
}

// sqlRows are the rows of a *sql.Rows, as pgx.Rows, for scanAll: their columns' names, and Scan.
type sqlRows struct {
	rows   *sql.Rows
	fields []pgconn.FieldDescription
	err    error
}

func (r *sqlRows) Close()                                       { _ = r.rows.Close() }
func (r *sqlRows) Err() error                                   { return cmpOrErr(r.err, r.rows.Err()) }
func (r *sqlRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r *sqlRows) FieldDescriptions() []pgconn.FieldDescription { return r.fields }
func (r *sqlRows) Next() bool                                   { return r.err == nil && r.rows.Next() }
func (r *sqlRows) Scan(dest ...any) error                       { return r.rows.Scan(dest...) }
func (r *sqlRows) RawValues() [][]byte                          { return nil }
func (r *sqlRows) Conn() *pgx.Conn                              { return nil }
func (r *sqlRows) TypeMap() *pgtype.Map                         { return nil }

func (r *sqlRows) Values() ([]any, error) {
	return nil, errors.New("persistence: Values of the rows of a *sql.Tx")
}
