package persistence

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/internal/pgtest"
)

// A bulk start sends one NOTIFY for the work it makes available, and none per execution: no one
// can be waiting on an execution that did not exist before the commit.
func TestCreateExecutionsNotifiesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{b.store.Channel()}.Sanitize())
	require.NoError(t, err)

	const n = 50
	items := make([]map[string]json.RawMessage, n)
	for i := range items {
		items[i] = map[string]json.RawMessage{"x": json.RawMessage(`1`)}
	}
	execs, err := b.store.CreateExecutions(ctx, b.g, items)
	require.NoError(t, err)
	require.Len(t, execs, n)
	counts, err := b.store.StateCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{StateAvailable: n}, counts, "one computation of y per execution")

	// Notifications arrive in commit order: the marker comes after everything the call sent.
	const marker = "test-marker"
	_, err = conn.Exec(ctx, "SELECT pg_notify($1, $2)", b.store.Channel(), marker)
	require.NoError(t, err)
	var got []string
	for {
		note, err := conn.WaitForNotification(ctx)
		require.NoError(t, err)
		if note.Payload == marker {
			break
		}
		got = append(got, note.Payload)
	}
	require.Equal(t, []string{PayloadWork}, got)
}
