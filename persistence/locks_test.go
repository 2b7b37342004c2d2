package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// logRecords is a slog handler that hands each record to a channel.
type logRecords chan slog.Record

func (l logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l logRecords) WithGroup(string) slog.Handler            { return l }
func (l logRecords) Handle(_ context.Context, r slog.Record) error {
	select {
	case l <- r.Clone():
	default: // the test reads what it needs
	}
	return nil
}

// attrs returns a record's attributes as text.
func attrs(r slog.Record) map[string]string {
	out := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		out[a.Key] = a.Value.String()
		return true
	})
	return out
}

// A batch of outcomes waits for a row that another transaction holds no longer than the lock
// timeout: it fails as a whole, having written nothing, and logs which row it waited for and
// who holds it. Once the row is free, the same outcomes are recorded.
func TestRecordGivesUpOnAHeldExecutionAfterTheLockTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.ready(t, 2)
	store := b.newStore(t, Config{Graphs: []*graph.Graph{b.g}, LockTimeout: 200 * time.Millisecond})
	logs := make(logRecords, 100)
	store.logger = slog.New(logs)
	claimed, err := store.Claim(ctx, "r1", 2)
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	outs := make([]Outcome, len(claimed))
	for i, c := range claimed {
		outs[i] = Outcome{C: c, Result: json.RawMessage(`7`), Used: map[string]int64{"x": 1}}
	}

	holder, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	defer func() { _ = holder.Close(ctx) }()
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, fmt.Sprintf("SELECT 1 FROM %s WHERE id = $1 FOR UPDATE",
		pgx.Identifier{b.schema, "executions"}.Sanitize()), ids[0])
	require.NoError(t, err)

	rctx, cancel := context.WithTimeout(ctx, 10*time.Second) // the test's bound, not the store's
	defer cancel()
	began := time.Now()
	_, err = store.Record(rctx, outs)
	waited := time.Since(began)
	require.ErrorIs(t, err, ErrLockTimeout)
	require.Less(t, waited, 5*time.Second, "the batch waited past its lock timeout")
	require.ErrorContains(t, err, ids[0], "the error names the execution held")
	vals, err := store.Values(ctx, ids[1])
	require.NoError(t, err)
	require.False(t, vals.Has("y"), "a failed batch writes nothing")
	var logged slog.Record
	for logged.Message == "" {
		select {
		case r := <-logs:
			if strings.Contains(r.Message, "lock") {
				logged = r
			}
		default:
			t.Fatal("nothing was logged of the lock the batch waited for")
		}
	}
	heldBy := attrs(logged)["held_by"]
	t.Logf("%s: held_by=%s waited_for=%s", logged.Message, heldBy, attrs(logged)["waited_for"])
	require.Contains(t, heldBy, "execution "+ids[0], "the log says which row was held")
	require.Contains(t, heldBy, fmt.Sprint(holder.PgConn().PID()), "and by which session")
	require.NotContains(t, heldBy, ids[1])

	require.NoError(t, tx.Rollback(ctx))
	lost, err := store.Record(ctx, outs)
	require.NoError(t, err)
	require.Equal(t, []error{nil, nil}, lost)
	for _, id := range ids {
		vals, err := store.Values(ctx, id)
		require.NoError(t, err)
		require.Equal(t, int64(7), vals.Int("y"))
	}
}
