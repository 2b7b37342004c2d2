package journey_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/journey-go/journey/persistence"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// warnings is a slog handler that hands each warning and error to a channel.
type warnings chan slog.Record

func (w warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w warnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w warnings) WithGroup(string) slog.Handler                { return w }
func (w warnings) Handle(_ context.Context, r slog.Record) error {
	select {
	case w <- r.Clone():
	default: // the test reads what it needs
	}
	return nil
}

// The completer waits for an execution's row, which another transaction holds, no longer than
// Config.LockTimeout, and logs who holds it; the outcome is recorded once the row is free, by the
// attempt that ran, with no other.
func TestCompleterGivesUpOnAHeldExecutionAndRecordsOnceItIsFree(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}, 1), make(chan struct{})
	g := graph.MustNew("held", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			entered <- struct{}{}
			select {
			case <-release:
				return in.Int("x") + 1, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}),
	})
	logs := make(warnings, 100)
	cfg := testConfig(t, g)
	cfg.LockTimeout = 200 * time.Millisecond
	cfg.Logger = slog.New(logs)
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("y never ran")
	}

	holder, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	defer func() { _ = holder.Close(ctx) }()
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+pgx.Identifier{cfg.Schema, "executions"}.Sanitize()+" WHERE lane = $1 AND id = $2 FOR UPDATE", persistence.LaneOf(ex.ID), ex.ID)
	require.NoError(t, err)
	released := time.Now()
	close(release)
	bound := time.After(unpolled)
	for gaveUp := false; !gaveUp; {
		select {
		case r := <-logs:
			if strings.Contains(r.Message, "gave up waiting for a lock") {
				gaveUp = true
				var heldBy string
				r.Attrs(func(a slog.Attr) bool {
					if a.Key == "held_by" {
						heldBy = a.Value.String()
					}
					return true
				})
				require.Contains(t, heldBy, "execution "+ex.ID)
			}
		case <-bound:
			t.Fatal("the completer waited for the held row past its lock timeout")
		}
	}
	t.Logf("gave up %s after y returned", time.Since(released))

	require.NoError(t, tx.Rollback(ctx))
	v, err := rt.Get(ctx, ex.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, int64(2), v.Int())
	ys := attempts(t, rt, ex.ID, "y")
	require.Len(t, ys, 1, "the attempt that ran recorded its outcome")
	require.Equal(t, journey.StateSuccess, ys[0].State)
}
