package persistence

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/uptrace/bun"

	"github.com/journey-go/journey/persistence/machine"
)

// txn is a write transaction that goes out in as few round trips as its work allows. bun and pgx
// share its one connection. The BEGIN and the statements that load what the write needs go
// together in one pgx batch; a statement whose result decides what comes next goes through bun
// on its own; and the statements that end the write (revisions, NOTIFY) are kept for the COMMIT,
// and go with it in a last batch.
//
// Each statement of a batch takes its own snapshot, as it would on its own: a read queued after
// a lock sees what the lock's previous holder committed.
type txn struct {
	bun.Conn // the statements through bun: a bun.IDB
	// pg is the connection under Conn. database/sql lends it for as long as Conn is held, and the
	// two are never used at once.
	pg    *pgx.Conn
	begun bool   // BEGIN has been sent
	tail  []step // statements sent with the COMMIT
	// plans are the plans the transaction applies (finish), and handing those whose new values go
	// to the store's Handoff, at the COMMIT.
	plans, handing []*machine.Plan
	// wakes are the map nodes whose children have all ended (endsStep), promoteLater that the
	// promotion lock was busy: afterCommit does both.
	wakes        []mapRef
	promoteLater bool
	// promoteHere: the write is a batch of outcomes, which promotes what they made due in its own
	// transaction (see finish).
	promoteHere bool
	// deferred are the executions whose Sets, in an application's transaction of REPEATABLE READ
	// or SERIALIZABLE, leave their advance for after its commit (see setValuesOf).
	deferred []string
	// notes are the NOTIFY payloads sent once the transaction has committed (see notes).
	notes []string
	// reserved counts the reservations of the store's Local, and claiming are the executions
	// whose attempts are claimed with them (see Store.claimLocally).
	reserved int
	claiming []*machine.Plan
	// claim: the transaction is a Claim, not a write (the Committed hook hears of writes).
	claim bool
	// caller: the transaction is the application's (inCaller), which commits it or not; sqlTx
	// is it when it is a *sql.Tx, whose statements go one at a time (sendSQL).
	caller bool
	sqlTx  *sql.Tx
}

// step is one statement of a batch, and what reads its result; nil read discards it.
type step struct {
	sql  string
	args []any
	read func(br pgx.BatchResults) error
}

// inTxn runs fn in a txn on a connection of db, and commits it, telling the store's Handoff
// about the executions fn left in t.handing, and then sending the notes fn left in t.notes. If fn
// fails, or the commit does, the transaction is rolled back.
func (s *Store) inTxn(ctx context.Context, db *bun.DB, fn func(ctx context.Context, t *txn) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("taking a connection: %w", err)
	}
	defer conn.Close() // a connection left in a transaction is discarded, not reused (a second Close does nothing)
	t := &txn{Conn: conn}
	if t.pg, err = pgxOf(conn); err != nil {
		return err
	}
	if err := fn(ctx, t); err != nil {
		s.handOver(t, false)
		t.rollback(ctx)
		return err
	}
	for _, p := range t.handing {
		s.handoff.Committing(p.Exec().ID, p.Revision())
	}
	err = t.send(ctx, append(t.tail, step{sql: "COMMIT"})...)
	if err == nil && s.hooks.Committed != nil && !t.claim {
		err = s.hooks.Committed(t.handed())
	}
	for _, p := range t.handing {
		if err == nil {
			s.handoff.Committed(p.Exec().ID, p.Revision(), p.Values())
		} else {
			s.handoff.Aborted(p.Exec().ID, p.Revision())
		}
	}
	// Last: the attempts handed over are the dispatcher's from here.
	s.handOver(t, err == nil)
	if err != nil {
		t.rollback(ctx)
	}
	// The connection goes back to the pool before what follows the COMMIT takes one (a cascade, a
	// wake, a promotion, a release): held meanwhile, as many writes as the pool has connections
	// would each wait for a second one, for good.
	_ = conn.Close()
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			// PostgreSQL answered: a statement of the batch, or the COMMIT itself (a deferred
			// constraint), failed, and the transaction rolled back.
			return fmt.Errorf("committing: %w", err)
		}
		// No answer: the server may have committed. The attempts claimed in t may be RUNNING
		// under tokens that nothing here runs; they are given back, fenced by those tokens.
		s.releaseUnknown(ctx, t)
		return fmt.Errorf("%w: committing: %w", ErrOutcomeUnknown, err)
	}
	s.notes.send(t.notes)
	s.afterCommit(ctx, t)
	return nil
}

// Caller is a transaction of the application's that a write goes in (inCaller): a pgx.Tx, or else
// a *sql.Tx.
type Caller struct {
	Pgx pgx.Tx
	SQL *sql.Tx
}

// run runs a write's fn in a transaction: the store's own (Store.inTxn), or the application's
// (Store.inCaller).
type run func(ctx context.Context, fn func(ctx context.Context, t *txn) error) error

// own runs fn in a transaction of the store's, which it commits.
func (s *Store) own(ctx context.Context, fn func(ctx context.Context, t *txn) error) error {
	return s.inTxn(ctx, s.db, fn)
}

// inCaller returns the run of a write in tx, a transaction of the application's: the write's
// statements go in it, with the NOTIFY of the work and the changes they make, which PostgreSQL
// sends when the application commits, and not at all if it rolls back. Nothing is claimed here,
// nor promoted past a concurrency key or a limit (a replica does that, woken by the NOTIFY):
// either would hold what other transactions wait for until the application ends its own. If fn
// or a statement fails, tx is left to the application, to roll back.
func (s *Store) inCaller(tx Caller) run {
	return func(ctx context.Context, fn func(ctx context.Context, t *txn) error) error {
		t := &txn{begun: true, caller: true, sqlTx: tx.SQL}
		if tx.Pgx != nil {
			t.pg = tx.Pgx.Conn()
		}
		if err := fn(ctx, t); err != nil {
			return err
		}
		steps := t.tail
		for _, p := range t.notes {
			steps = append(steps, step{sql: "SELECT pg_notify($1, $2)", args: []any{s.channel, p}})
		}
		// What follows the commit waits for it (see callerCommits).
		var xid string
		after := t.afterCallerCommit()
		if after {
			steps = append(steps, xidStep(&xid))
		}
		if err := t.send(ctx, steps...); err != nil {
			return err
		}
		if after {
			s.callers.wait(xid, t)
		}
		return nil
	}
}

// handed returns the ids of the executions in t.handing.
func (t *txn) handed() []string {
	ids := make([]string, len(t.handing))
	for i, p := range t.handing {
		ids[i] = p.Exec().ID
	}
	return ids
}

// pgxOf returns the pgx connection under conn, which database/sql lends for as long as conn is
// held.
func pgxOf(conn bun.Conn) (pg *pgx.Conn, err error) {
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(interface{ Conn() *pgx.Conn })
		if !ok {
			return fmt.Errorf("persistence: Config.DB must be opened by OpenDB, or use pgx's stdlib driver, not %T", dc)
		}
		pg = c.Conn()
		return nil
	})
	return pg, err
}

// withPgx runs fn on a pgx connection of db, outside any transaction: its statements go in the
// pool's mode, prepared by default.
func withPgx(ctx context.Context, db *bun.DB, fn func(pg *pgx.Conn) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("taking a connection: %w", err)
	}
	defer conn.Close()
	pg, err := pgxOf(conn)
	if err != nil {
		return err
	}
	return fn(pg)
}

// rollback ends a failed transaction. If that fails too, the connection still holds the
// transaction, and the pool discards it when it comes back.
func (t *txn) rollback(ctx context.Context) {
	if !t.begun {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = t.pg.Exec(ctx, "ROLLBACK")
}

// begin sends the BEGIN now, if it has not gone yet: a bun statement is about to go first.
func (t *txn) begin(ctx context.Context) error { return t.send(ctx) }

// send sends steps in one round trip, behind the BEGIN if that has not gone yet, and reads their
// results in order. The first error ends the batch: PostgreSQL skips what follows it.
func (t *txn) send(ctx context.Context, steps ...step) (err error) {
	if t.begun && len(steps) == 0 {
		return nil
	}
	if t.sqlTx != nil {
		return sendSQL(ctx, t.sqlTx, steps)
	}
	var b pgx.Batch
	if !t.begun {
		b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED") // whatever default_transaction_isolation says: see readCommitted
	}
	for _, st := range steps {
		b.Queue(st.sql, columns(st.args)...)
	}
	br := t.pg.SendBatch(ctx, &b)
	defer func() {
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}()
	if !t.begun {
		t.begun = true
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return readEach(steps, br)
}

// readEach reads the result of each step from br, in order; the first error ends it. A step
// without a read has its result read all the same.
func readEach(steps []step, br pgx.BatchResults) (err error) {
	for _, st := range steps {
		if st.read == nil {
			_, err = br.Exec()
		} else {
			err = st.read(br)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// atCommit keeps a statement to send with the COMMIT.
func (t *txn) atCommit(sql string, args ...any) { t.tail = append(t.tail, step{sql: sql, args: args}) }

// collect is a step's read that scans every row of its result into *into, by column name, after
// those of the steps before it that collect into it too.
func collect[T any](into *[]*T) func(br pgx.BatchResults) error {
	return func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		got, err := scanAll[T](rows)
		if *into == nil {
			*into = got
		} else { // the steps of a statement sent once a lane collect into one slice
			*into = append(*into, got...)
		}
		return err
	}
}

// scanAll reads every row of rows into a new T, by column name, as pgx.RowToAddrOfStructByNameLax
// does: a field's db tag names its column, else its name does, matched ignoring case and
// underscores; a field without a column is left alone, and a column without a field is an error.
// It maps the columns to the fields once for all the rows, where pgx maps them again at each row,
// building a key of every column's name: a tenth of what journey bench -n 30000 allocated.
func scanAll[T any](rows pgx.Rows) ([]*T, error) {
	defer rows.Close()
	paths, err := fieldPaths(reflect.TypeFor[T](), rows.FieldDescriptions())
	if err != nil {
		return nil, err
	}
	out := []*T{}
	targets := make([]any, len(paths))
	names := make([]*internedText, len(paths))
	// A json.RawMessage is scanned as the []byte it is: pgx would unmarshal JSON into it, with
	// allocations for reflection, to the same bytes.
	raw := make([]bool, len(paths))
	for i, col := range rows.FieldDescriptions() {
		t := reflect.TypeFor[T]().FieldByIndex(paths[i]).Type
		raw[i] = t == reflect.TypeFor[json.RawMessage]()
		if interned[col.Name] && (t.Kind() == reflect.String || t == reflect.TypeFor[pgtype.Text]()) {
			names[i] = &internedText{}
			targets[i] = names[i]
		}
	}
	for rows.Next() {
		v := new(T)
		rv := reflect.ValueOf(v).Elem()
		for i, path := range paths {
			switch {
			case names[i] != nil:
				names[i].to = rv.FieldByIndex(path).Addr().Interface()
			case raw[i]:
				targets[i] = (*[]byte)(rv.FieldByIndex(path).Addr().Interface().(*json.RawMessage))
			default:
				targets[i] = rv.FieldByIndex(path).Addr().Interface()
			}
		}
		if err := rows.Scan(targets...); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// interned are the columns whose few values are read again and again: scanAll reads them into
// one string per value, not a string per row (a tenth of a drain's allocations were strings).
var interned = map[string]bool{"node": true, "graph_key": true, "state": true, "graph_name": true, "graph_version": true,
	"replica_id": true}

// internedText scans a text column into to, a *string or a *pgtype.Text, as the one string of
// its value.
type internedText struct{ to any }

// Scan implements sql.Scanner, for the rows of a *sql.Tx (sendSQL).
func (t *internedText) Scan(src any) error {
	switch src := src.(type) {
	case nil:
		return t.ScanBytes(nil)
	case string:
		return t.ScanBytes([]byte(src))
	case []byte:
		return t.ScanBytes(src)
	}
	return fmt.Errorf("persistence: a text column read as %T", src)
}

// ScanBytes implements pgtype.BytesScanner.
func (t *internedText) ScanBytes(b []byte) error {
	switch to := t.to.(type) {
	case *pgtype.Text:
		*to = pgtype.Text{String: intern(b), Valid: b != nil}
	case *string:
		if b == nil {
			return errors.New("NULL in a column of a string")
		}
		*to = intern(b)
	}
	return nil
}

// internedStrings is the strings intern has kept, at most maxInterned of them: names of nodes,
// graphs and states, which a replica has few of.
var internedStrings = struct {
	sync.RWMutex
	m map[string]string
}{m: map[string]string{}}

const maxInterned = 10000

// intern returns b as a string: the one kept for its value, if there is one.
func intern(b []byte) string {
	internedStrings.RLock()
	s, ok := internedStrings.m[string(b)]
	internedStrings.RUnlock()
	if ok {
		return s
	}
	s = string(b)
	internedStrings.Lock()
	if len(internedStrings.m) < maxInterned {
		internedStrings.m[s] = s
	}
	internedStrings.Unlock()
	return s
}

// fieldPathsOf caches fieldPaths by type and column names.
var fieldPathsOf sync.Map

// fieldPaths returns, for each column, the index path of the field of t it is scanned into.
func fieldPaths(t reflect.Type, cols []pgconn.FieldDescription) ([][]int, error) {
	type key struct {
		t     reflect.Type
		names string
	}
	names := make([]string, len(cols))
	for i, col := range cols {
		names[i] = col.Name
	}
	k := key{t, strings.Join(names, "\x00")}
	if paths, ok := fieldPathsOf.Load(k); ok {
		return paths.([][]int), nil
	}
	paths := make([][]int, len(cols))
	var walk func(t reflect.Type, index []int)
	walk = func(t reflect.Type, index []int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			path := append(slices.Clone(index), i)
			if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
				walk(sf.Type, path)
				continue
			}
			tag, tagged := sf.Tag.Lookup("db")
			tag, _, _ = strings.Cut(tag, ",")
			if !sf.IsExported() || tag == "-" {
				continue
			}
			for c, col := range cols {
				if tagged && strings.EqualFold(col.Name, tag) ||
					!tagged && strings.EqualFold(strings.ReplaceAll(col.Name, "_", ""), sf.Name) {
					paths[c] = path
					break
				}
			}
		}
	}
	walk(t, nil)
	for c, path := range paths {
		if path == nil {
			return nil, fmt.Errorf("%v has no field for column %q", t, cols[c].Name)
		}
	}
	fieldPathsOf.Store(k, paths)
	return paths, nil
}

// dollars numbers the ? placeholders of a bun query as pgx's $1, $2, …, so that bun and a batch
// can share it. The queries it is used on have no other question mark.
func dollars(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r != '?' {
			b.WriteRune(r)
			continue
		}
		n++
		b.WriteString("$" + strconv.Itoa(n))
	}
	return b.String()
}

// column is a slice of a batch's rows, as an array argument, its elements pgtype's values: pgx
// encodes each through a pointer to it, with no allocation. (Given a slice of Go values, pgx boxes
// each element, or walks a slice of pointers by reflection: an allocation or more per element, of
// each of a write's thirty columns.)
type column[T any] []T

func (c column[T]) Dimensions() []pgtype.ArrayDimension {
	if c == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(c)), LowerBound: 1}}
}

func (c column[T]) Index(i int) any { return &c[i] }

func (c column[T]) IndexType() any { return new(T) }

// Value is the column as an array literal, for a parameter whose type pgx does not know (the
// simple protocol, QueryExecModeExec), which PostgreSQL reads as the type the statement gives it.
func (c column[T]) Value() (driver.Value, error) {
	if c == nil {
		return nil, nil
	}
	b := []byte{'{'}
	for i := range c {
		if i > 0 {
			b = append(b, ',')
		}
		v, err := any(&c[i]).(driver.Valuer).Value()
		if err != nil {
			return nil, err
		}
		switch v := v.(type) {
		case nil:
			b = append(b, "NULL"...)
		case int64:
			b = strconv.AppendInt(b, v, 10)
		case bool:
			b = strconv.AppendBool(b, v)
		case time.Time:
			b = strconv.AppendQuote(b, v.Format(time.RFC3339Nano))
		case string:
			b = append(b, '"')
			for _, r := range []byte(v) {
				if r == '"' || r == '\\' {
					b = append(b, '\\')
				}
				b = append(b, r)
			}
			b = append(b, '"')
		default:
			return nil, fmt.Errorf("a column of %T", v)
		}
	}
	return string(append(b, '}')), nil
}

// columns returns args with their slices as columns, NULL for a nil pointer.
func columns(args []any) []any {
	out := args
	for i, a := range args {
		var c any
		switch a := a.(type) {
		case []string:
			c = convert(a, pgText)
		case []*string:
			c = convert(a, pgTextAt)
		case []int16:
			c = convert(a, func(v int16) pgtype.Int8 { return pgInt(int64(v)) })
		case []int:
			c = convert(a, func(v int) pgtype.Int8 { return pgInt(int64(v)) })
		case []*int:
			c = convert(a, pgIntOf)
		case []int64:
			c = convert(a, pgInt)
		case []*int64:
			c = convert(a, pgIntAt)
		case []bool:
			c = convert(a, func(v bool) pgtype.Bool { return pgtype.Bool{Bool: v, Valid: true} })
		case []time.Time:
			c = convert(a, pgTime)
		case []*time.Time:
			c = convert(a, pgTimeAt)
		default:
			continue
		}
		if &out[0] == &args[0] {
			out = slices.Clone(args)
		}
		out[i] = c
	}
	return out
}

// The elements of a column: a value, or NULL for a nil pointer.
func pgText(s string) pgtype.Text           { return pgtype.Text{String: s, Valid: true} }
func pgTextAt(s *string) pgtype.Text        { return pgtype.Text{String: deref(s), Valid: s != nil} }
func pgInt(n int64) pgtype.Int8             { return pgtype.Int8{Int64: n, Valid: true} }
func pgIntAt(n *int64) pgtype.Int8          { return pgtype.Int8{Int64: derefInt64(n), Valid: n != nil} }
func pgIntOf(n *int) pgtype.Int8            { return pgtype.Int8{Int64: int64(derefInt(n)), Valid: n != nil} }
func pgTime(t time.Time) pgtype.Timestamptz { return pgtype.Timestamptz{Time: t, Valid: true} }
func pgTimeAt(t *time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: derefTime(t), Valid: t != nil}
}

// convert returns the column of the values of vs, as f gives them; nil for nil.
func convert[V, T any](vs []V, f func(V) T) column[T] {
	if vs == nil {
		return nil
	}
	c := make(column[T], len(vs))
	for i, v := range vs {
		c[i] = f(v)
	}
	return c
}
