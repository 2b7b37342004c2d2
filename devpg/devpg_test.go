package devpg

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	c, err := Start(ctx, nil, Setting("work_mem", "7MB"), Setting("search_path", `"it's", public`))
	if errors.Is(err, ErrNoBinaries) {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })

	query := func(sql string) string {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.URL())
		require.NoError(t, err)
		defer conn.Close(ctx)
		var s string
		require.NoError(t, conn.QueryRow(ctx, sql).Scan(&s))
		return s
	}
	require.Equal(t, "off", query("SHOW fsync"))
	require.Equal(t, "off", query("SHOW synchronous_commit"))
	require.Equal(t, "off", query("SHOW full_page_writes"))
	require.Equal(t, "500", query("SHOW max_connections"))
	require.Equal(t, "127.0.0.1", query("SHOW listen_addresses"))
	require.Equal(t, "postgres", query("SELECT current_user::text"))
	require.Equal(t, "7MB", query("SHOW work_mem"), "a Setting overrides the default")
	require.Equal(t, `"it's", public`, query("SHOW search_path"), "a Setting's value is quoted")

	// A connection open across a restart is broken by it; a new one works on the same URL.
	conn, err := pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	url := c.URL()
	require.NoError(t, c.Restart(ctx))
	require.Equal(t, url, c.URL())
	require.Error(t, conn.Ping(ctx))
	require.Equal(t, "1", query("SELECT '1'"))

	dir := c.dir
	require.NoError(t, c.Stop())
	require.NoError(t, c.Stop(), "a second Stop does nothing")
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Error(t, c.Restart(ctx))
	_, err = pgx.Connect(ctx, url)
	require.Error(t, err)
}

// A bouncer passes its clients through to the cluster, and runs its ConnectQuery, quoted whole,
// on each server connection that it opens; Stop removes its directory.
func TestBouncerConnectQuery(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, nil)
	if errors.Is(err, ErrNoBinaries) {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	b, err := StartBouncerWith(ctx, c.URL(), BouncerConfig{
		ConnectQuery: "SET plan_cache_mode = force_generic_plan; SET search_path = 'it''s', public",
	})
	if errors.Is(err, ErrNoBouncer) && os.Getenv("JOURNEY_SKIP_POOLER") == "1" {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Stop() })

	conn, err := pgx.Connect(ctx, b.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var mode, path string
	var port int
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('plan_cache_mode'), current_setting('search_path'), "+
		"current_setting('port')::int", pgx.QueryExecModeSimpleProtocol).Scan(&mode, &path, &port))
	require.Equal(t, "force_generic_plan", mode)
	require.Equal(t, `"it's", public`, path)
	require.Equal(t, c.port, port, "the cluster answers")
	require.NotEqual(t, c.URL(), b.URL())

	dir := b.dir
	require.NoError(t, b.Stop())
	require.NoError(t, b.Stop(), "a second Stop does nothing")
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestURLOrStartUsesDatabaseURL(t *testing.T) {
	const url = "postgres://example.invalid/db"
	t.Setenv("DATABASE_URL", url)
	got, stop, err := URLOrStart(t.Context(), nil)
	require.NoError(t, err)
	require.Equal(t, url, got)
	stop()
}

func TestVersionDirs(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, name := range []string{"9.6", "15", "10", "16.1", "16", "notaversion"} {
		require.NoError(t, os.Mkdir(filepath.Join(root, name), 0o755))
	}
	var got []string
	for _, d := range versionDirs(root) {
		got = append(got, filepath.Base(d))
	}
	require.Equal(t, []string{"16.1", "16", "15", "10", "9.6"}, got)
	require.Empty(t, versionDirs(filepath.Join(root, "missing")))
}

func TestRemoveStaleDirs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	mk := func(name, owner string) string {
		dir := filepath.Join(tmp, dirPrefix+name)
		require.NoError(t, os.Mkdir(dir, 0o700))
		if owner != "" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, ownerFileName), []byte(owner), 0o644))
		}
		return dir
	}
	dead := mk("dead", "2147483646") // beyond any pid_max, so never alive
	live := mk("live", "1")
	creating := mk("creating", "")

	removeStaleDirs(slog.New(slog.DiscardHandler))

	_, err := os.Stat(dead)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.DirExists(t, live)
	require.DirExists(t, creating)
}
