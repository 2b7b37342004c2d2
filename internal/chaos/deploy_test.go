//go:build linux

package chaos

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
)

// previousRelease is the release whose replicas the rolling-deploy test runs beside this one's:
// a commit of this repository's history, whose test binary it builds. docs/operating.md says
// which releases can roll over which.
const previousRelease = "724b9b9"

// buildRelease builds the test binary of this package at commit, from the repository's history,
// and returns its path.
func buildRelease(t *testing.T, commit string) string {
	t.Helper()
	git := func(args ...string) []byte {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), "git", args...).Output()
		if err != nil {
			t.Fatalf("git %s: %v; the rolling-deploy test builds the release %s from this repository's history, "+
				"and needs a clone that has it (not a shallow one)", strings.Join(args, " "), err, commit)
		}
		return out
	}
	root := strings.TrimSpace(string(git("rev-parse", "--show-toplevel")))
	git("-C", root, "cat-file", "-e", commit+"^{commit}")
	dir := t.TempDir()
	archive := exec.CommandContext(t.Context(), "git", "-C", root, "archive", "--format=tar", commit)
	extract := exec.CommandContext(t.Context(), "tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	require.NoError(t, err)
	extract.Stdin = pipe
	require.NoError(t, extract.Start())
	require.NoError(t, archive.Run())
	require.NoError(t, extract.Wait())
	bin := filepath.Join(dir, "chaos.test")
	// With -race, as make test builds this binary: the dependencies come from the build cache.
	build := exec.CommandContext(t.Context(), "go", "test", "-race", "-c", "-o", bin, "./internal/chaos")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	build.Stderr = &stderr
	began := time.Now()
	require.NoError(t, build.Run(), "building release %s: %s", commit, stderr.String())
	t.Logf("built release %s in %v", commit, time.Since(began).Round(time.Second))
	return bin
}

// deployRounds is how many rounds each replica's clients must complete once the other release
// has joined (see clients).
const deployRounds = 20

// A rolling deploy in either direction: the replicas of the previous release keep starting,
// setting, computing and getting while this release's migrate the schema under them, and the
// replicas of this release do the same on a schema that the previous release's migrated, then
// beside them. No client call fails, and every execution completes, with one success per node.
func TestRollingDeploy(t *testing.T) {
	old := buildRelease(t, previousRelease)
	cfg := defaults()
	cfg.Clients = 4
	for _, tc := range []struct {
		name  string
		first string // the release that migrates the schema: "old" or "new"
	}{
		{"previous release first, then this one migrates", "old"},
		{"this release first, then the previous one joins", "new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := unmigratedCluster(t, pgtest.URL(t), cfg)
			c.quiet = true
			bins := map[string]string{"old": old, "new": os.Args[0]}
			second := map[string]string{"old": "new", "new": "old"}[tc.first]
			a := c.startBinary(t, tc.first, bins[tc.first])
			a.waitFor(t, "its first rounds", func(w *worker) bool { return w.count("load ok ") >= deployRounds })
			before := c.migrations(t)
			b := c.startBinary(t, second, bins[second])
			t.Logf("migrations applied by the %s release before the %s one started: %d; after: %d", tc.first, second, before, c.migrations(t))
			// The newer release has migrated the schema by now, whichever came first.
			since := a.count("load ok ")
			a.waitFor(t, "rounds beside the other release", func(w *worker) bool { return w.count("load ok ")-since >= deployRounds })
			b.waitFor(t, "rounds beside the other release", func(w *worker) bool { return w.count("load ok ") >= deployRounds })
			for _, w := range []*worker{a, b} {
				w.stop(t)
				require.Zero(t, w.count("load error "), "replica of the %s release: %v", w.id, w.errors())
			}
			// What the stops left to run, a replica of this release drains.
			c.cfg.Clients, c.cfg.ServeLoad = 0, true
			c.start(t, "drain")
			c.auditLoad(t)
		})
	}
}

// migrations counts the migrations applied to the cluster's schema.
func (c *cluster) migrations(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, c.store.DB().QueryRowContext(context.Background(), c.q(`SELECT count(*) FROM ?.bun_migrations`)).Scan(&n))
	return n
}

// errors are the lines of the clients' errors.
func (w *worker) errors() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, l := range w.lines {
		if strings.HasPrefix(l, "load error ") {
			out = append(out, l)
		}
	}
	return out
}

// auditLoad waits until no attempt is left to run, then checks, from the database, that every
// execution of the load graph whose inputs are set has its final value, and that each node
// succeeded once. A stop may come between a client's Start and its Set.
func (c *cluster) auditLoad(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c.waitDone(t, 1, time.Minute)
	var executions, done int
	err := c.store.DB().QueryRowContext(ctx, c.q(`SELECT count(*), count(d.node) FROM ?.executions e
		JOIN ?."values" b ON b.execution_id = e.id AND b.node = 'b'
		LEFT JOIN ?."values" d ON d.execution_id = e.id AND d.node = 'double' WHERE e.graph_name = 'load'`)).Scan(&executions, &done)
	require.NoError(t, err)
	require.Positive(t, executions)
	require.Equal(t, executions, done, "every execution of the load graph whose inputs are set has its value")
	var twice int
	err = c.store.DB().QueryRowContext(ctx, c.q(`SELECT count(*) FROM (SELECT execution_id, node FROM ?.computations
		WHERE state = 'SUCCESS' GROUP BY 1, 2 HAVING count(*) > 1) d`)).Scan(&twice)
	require.NoError(t, err)
	require.Zero(t, twice, "nodes that succeeded twice")
	counts, err := c.store.StateCounts(ctx)
	require.NoError(t, err)
	for _, state := range []string{persistence.StatePending, persistence.StateAvailable, persistence.StateRunning,
		persistence.StateFailed, persistence.StateAbandoned} {
		require.Zero(t, counts[state], "attempts %s: %v", state, counts)
	}
}
