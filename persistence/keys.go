package persistence

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrKeyHeld means an execution cannot be unarchived: another unarchived execution of its graph
// holds its key.
var ErrKeyHeld = errors.New("journey: key held by another execution")

// keyIndex is the unique index that keeps a key to one unarchived execution of a graph.
const keyIndex = "executions_key_idx"

// FindByKey returns the unarchived execution of graph name (of any version) that holds key, or
// ErrNotFound. It reads one entry of executions_key_idx.
func (s *Store) FindByKey(ctx context.Context, name, key string) (*Execution, error) {
	if err := checkTexts("graph", name, "key", key); err != nil {
		return nil, err
	}
	if key == "" {
		return nil, fmt.Errorf("%w: no execution holds the empty key; give the key the execution was started with", ErrNotFound)
	}
	var execs []*Execution
	err := s.db.NewRaw(s.q(`SELECT `+cols("", executionColumns)+` FROM {s}.executions WHERE key = ? AND graph_name = ? AND archived_at IS NULL`),
		key, name).Scan(ctx, &execs)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("finding the execution of graph %q with key %q: %w", name, key, err)
	}
	if len(execs) == 0 {
		return nil, fmt.Errorf("%w: no unarchived execution of graph %q holds key %q", ErrNotFound, name, key)
	}
	return execs[0], nil
}

// isIndex reports whether pg is a violation of the unique index index. On Citus, the error comes
// from a worker, without the name of the constraint, and names the index of one of its shards in
// its message, the index's name followed by _ and the shard's id.
func isIndex(pg *pgconn.PgError, index string) bool {
	if pg.ConstraintName != "" {
		return pg.ConstraintName == index
	}
	_, name, ok := strings.Cut(pg.Message, `unique constraint "`+index+"_")
	shard, _, closed := strings.Cut(name, `"`)
	return ok && closed && shard != "" && strings.Trim(shard, "0123456789") == ""
}

// keyHeld returns ErrKeyHeld, with what to do, if err is the unique violation of the key that
// unarchiving execution e would hold again; else nil.
func keyHeld(err error, e *Execution) error {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "23505" || !isIndex(pg, keyIndex) {
		return nil
	}
	return fmt.Errorf("%w: unarchiving %s: another unarchived execution of graph %q holds its key %q; archive that one "+
		"first (FindByKey, or journey executions list -key, finds it), and unarchive %s then", ErrKeyHeld, e.ID,
		e.GraphName, deref(e.Key), e.ID)
}
