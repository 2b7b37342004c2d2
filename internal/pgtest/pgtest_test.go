package pgtest

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(Runner{M: m})
}

func TestSchemaName(t *testing.T) {
	t.Parallel()
	valid := regexp.MustCompile(`^jt_[a-z0-9_]+_[0-9a-f]{8}$`)
	for _, name := range []string{
		"TestFoo",
		"TestFoo/Bar_baz",
		"TestFoo/#00",
		"Test" + strings.Repeat("VeryLong", 20),
		"Test/ünïcode ☃ name",
		"",
	} {
		got := schemaName(name)
		require.LessOrEqual(t, len(got), 63, got)
		if name != "" {
			require.Regexp(t, valid, got)
		}
		require.NotContains(t, got, "__", got)
		require.NotEqual(t, got, schemaName(name), "names are unique")
	}
	require.Regexp(t, `^jt_testfoo_bar_baz_[0-9a-f]{8}$`, schemaName("TestFoo/Bar_baz"))
	require.Regexp(t, `^jt_[0-9a-f]{8}$`, schemaName(""))
}

func TestSchemaIsDroppedAtCleanup(t *testing.T) {
	t.Parallel()
	db := DB(t)
	exists := func(schema string) bool {
		var ok bool
		require.NoError(t, db.QueryRowContext(t.Context(),
			"SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", schema).Scan(&ok))
		return ok
	}

	var schema string
	t.Run("sub", func(t *testing.T) {
		schema = Schema(t)
		require.False(t, exists(schema), "Schema creates nothing")
		bdb := BunDB(t, URL(t))
		_, err := bdb.ExecContext(t.Context(), "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".t (id int)")
		require.NoError(t, err)
		require.True(t, exists(schema))
	})
	require.False(t, exists(schema), "the cleanup drops the schema")
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := Cluster(t)
	require.NoError(t, BunDB(t, c.URL()).PingContext(t.Context()))
	require.NoError(t, c.Restart(t.Context()))
	require.NoError(t, BunDB(t, c.URL()).PingContext(t.Context()))
}
