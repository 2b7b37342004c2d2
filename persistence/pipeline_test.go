package persistence

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/internal/pgtest"
)

// scanAll maps columns to fields as pgx.RowToAddrOfStructByNameLax does: by db tag, else by the
// field's name without regard to case and underscores, through embedded structs; a field without
// a column is left alone, and a column without a field is an error.
func TestScanAllMapsColumnsByName(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })

	type inner struct {
		Tagged []int64 `db:"some_list"`
	}
	type row struct {
		ExecutionID string
		Count       int
		Absent      string
		Ignored     string `db:"-"`
		inner
	}
	for range 2 { // the second time from the cache
		rows, err := conn.Query(ctx, `SELECT 'e' || g AS execution_id, g AS "COUNT", ARRAY[g, g + 1] AS some_list
			FROM generate_series(1, 2) g ORDER BY g`)
		require.NoError(t, err)
		got, err := scanAll[row](rows)
		require.NoError(t, err)
		require.Equal(t, []*row{
			{ExecutionID: "e1", Count: 1, inner: inner{Tagged: []int64{1, 2}}},
			{ExecutionID: "e2", Count: 2, inner: inner{Tagged: []int64{2, 3}}},
		}, got)
	}

	rows, err := conn.Query(ctx, `SELECT 1 AS count, 'x' AS ignored`)
	require.NoError(t, err)
	_, err = scanAll[row](rows)
	require.ErrorContains(t, err, `no field for column "ignored"`)

	rows, err = conn.Query(ctx, `SELECT 1 AS count WHERE false`)
	require.NoError(t, err)
	got, err := scanAll[row](rows)
	require.NoError(t, err)
	require.NotNil(t, got, "no rows: an empty slice, as pgx.CollectRows gives")
	require.Empty(t, got)
}
