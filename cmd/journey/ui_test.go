package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/internal/pgtest"
)

func TestUIRefusesToServeOtherMachinesWithoutAuth(t *testing.T) {
	t.Parallel()
	b := &opsBundle{url: pgtest.URL(t), schema: "no_such_schema"}

	code, _, stderr := b.ops(t, "ui", "--addr", "0.0.0.0:0")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "refusing to serve a non-loopback address without authentication")
	require.Contains(t, stderr, "--token")

	code, _, stderr = b.ops(t, "ui", "--addr", "0.0.0.0:0", "--basic-auth", "nopassword")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "want user:password")

	code, _, stderr = b.ops(t, "ui", "--addr", "127.0.0.1:0")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `schema "no_such_schema" holds no journey tables`)
}
