package persistence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/internal/pgtest"
)

// A schema's channel is a valid identifier: at most 63 bytes of UTF-8, whatever the length of
// the schema's name and the width of its characters; and two long names that differ anywhere
// get two channels.
func TestChannelNameIsAValidIdentifier(t *testing.T) {
	t.Parallel()
	for _, schema := range []string{
		"journey",
		strings.Repeat("s", 55), // the longest kept whole
		strings.Repeat("s", 56),
		strings.Repeat("é", 30),
		"a" + strings.Repeat("日", 20),
		"ab" + strings.Repeat("日", 20),
		"abc" + strings.Repeat("日", 20),
		strings.Repeat("🚀", 15),
	} {
		name := channelName(schema)
		require.LessOrEqual(t, len(name), 63, "%q", schema)
		require.True(t, utf8.ValidString(name), "%q gives %q", schema, name)
		require.True(t, strings.HasPrefix(name, "journey:"), name)
		if len("journey:"+schema) <= 63 {
			require.Equal(t, "journey:"+schema, name)
		} else {
			require.NotEqual(t, name, channelName(schema+"x"), "%q", schema)
		}
	}
}

// LISTEN and NOTIFY work on the channel of a long schema name of multi-byte characters, whose
// channel name is shortened.
func TestChannelOfALongMultibyteSchema(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	// 61 bytes, within PostgreSQL's 63 for the schema itself, and unique to this run.
	schema := "a" + strings.Repeat("日", 17) + "_" + hex.EncodeToString(suffix)
	require.LessOrEqual(t, len(schema), 63)
	s, err := New(Config{DB: pgtest.BunDB(t, pgtest.URL(t)), Schema: schema})
	require.NoError(t, err)
	require.Greater(t, len("journey:"+schema), 63, "the channel name is shortened")

	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.Channel()}.Sanitize())
	require.NoError(t, err)
	require.NoError(t, s.notify(ctx, s.db, PayloadWork))
	note, err := conn.WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, s.Channel(), note.Channel)
	require.Equal(t, PayloadWork, note.Payload)
}
