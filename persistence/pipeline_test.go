package persistence

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
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

// A column of few values (a node's name, a state, a replica) is read into one string per value,
// not one per row, and reads what each row holds; a NULL in it is an error, as for any string
// field, unless the field is a pgtype.Text.
func TestScanAllInternsNames(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := planner(t, nil) // a connection of its own

	type row struct {
		Node  string `db:"node"`
		State string `db:"state"`
		Other string `db:"other"`
	}
	rows, err := conn.Query(ctx, `SELECT 'n' || (g % 2) AS node, 'RUNNING' AS state, 'o' || g AS other
		FROM generate_series(1, 4) g ORDER BY g`)
	require.NoError(t, err)
	got, err := scanAll[row](rows)
	require.NoError(t, err)
	require.Equal(t, []*row{{"n1", "RUNNING", "o1"}, {"n0", "RUNNING", "o2"}, {"n1", "RUNNING", "o3"}, {"n0", "RUNNING", "o4"}}, got)
	require.Same(t, unsafe.StringData(got[0].Node), unsafe.StringData(got[2].Node), "one string for one name")
	require.Same(t, unsafe.StringData(got[0].State), unsafe.StringData(got[3].State))

	rows, err = conn.Query(ctx, `SELECT NULL::text AS node, 'x' AS state, 'y' AS other`)
	require.NoError(t, err)
	_, err = scanAll[row](rows)
	require.ErrorContains(t, err, "NULL")

	// A nullable one is read as pgtype.Text: NULL is not Valid.
	type nullable struct {
		ReplicaID pgtype.Text `db:"replica_id"`
	}
	rows, err = conn.Query(ctx, `SELECT CASE WHEN g = 2 THEN NULL ELSE 'r1' END AS replica_id FROM generate_series(1, 3) g ORDER BY g`)
	require.NoError(t, err)
	texts, err := scanAll[nullable](rows)
	require.NoError(t, err)
	require.Equal(t, []*nullable{{pgtype.Text{String: "r1", Valid: true}}, {}, {pgtype.Text{String: "r1", Valid: true}}}, texts)
	require.Same(t, unsafe.StringData(texts[0].ReplicaID.String), unsafe.StringData(texts[2].ReplicaID.String))
}

// A column reaches PostgreSQL whole, in the binary protocol and as an array literal in the
// simple one: NULLs, and strings that an array literal must escape.
func TestColumnsReachPostgreSQLWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	at := time.Date(2026, 11, 27, 12, 0, 0, 123456000, time.UTC)
	texts := []*string{new(string), nil, ptr(`a "quoted", {braced} \back\slashed`), ptr("NULL"), ptr("é ☃")}
	ints := []*int64{ptr(int64(-1)), nil, ptr(int64(1) << 40)}
	times := []*time.Time{&at, nil}
	flags := []bool{true, false}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
		conn, err := pgx.Connect(ctx, pgtest.URL(t))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		args := columns([]any{texts, ints, times, flags})
		var gotTexts []*string
		var gotInts []*int64
		var gotTimes []*time.Time
		var gotFlags []bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT $1::text[], $2::bigint[], $3::timestamptz[], $4::boolean[]`,
			append([]any{mode}, args...)...).Scan(&gotTexts, &gotInts, &gotTimes, &gotFlags), "mode %v", mode)
		require.Equal(t, texts, gotTexts, "mode %v", mode)
		require.Equal(t, ints, gotInts, "mode %v", mode)
		require.Len(t, gotTimes, 2)
		require.True(t, at.Equal(*gotTimes[0]), "mode %v: %v", mode, gotTimes[0])
		require.Nil(t, gotTimes[1])
		require.Equal(t, flags, gotFlags)
	}
}

func ptr[T any](v T) *T { return &v }
