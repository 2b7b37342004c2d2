//go:build linux

package chaos

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
)

// previousRelease is the release whose replicas the deploy test runs before this one's: a commit
// of this repository's history, whose test binary it builds. It is the last release of the
// previous row shape, which cannot roll over into this one (docs/operating.md).
const previousRelease = "ee40a6e"

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

// deployRounds is how many rounds each replica's clients must complete before the test moves on.
const deployRounds = 20

// A deploy across the row shape, which cannot roll. While a replica of the previous release is
// live, this release refuses to migrate, and changes nothing. Once that replica is killed in the
// middle of its work and has gone stale, this release migrates the schema, takes over what the
// killed replica left running or waiting, and serves its own clients; a replica of the previous
// release then refuses to start on the migrated schema. No client call of this release fails,
// and every execution completes, with one success per node.
func TestDeployAcrossTheRowShape(t *testing.T) {
	old := buildRelease(t, previousRelease)
	cfg := defaults()
	cfg.Clients = 4
	c := unmigratedCluster(t, pgtest.URL(t), cfg)
	c.quiet = true
	a := c.startBinary(t, "old", old)
	a.waitFor(t, "its first rounds, and work running", func(w *worker) bool {
		return w.count("load ok ") >= deployRounds && w.running() > 0
	})
	migrated := c.migrations(t)

	refused := c.launch(t, "new-refused", os.Args[0])
	<-refused.exited
	require.Zero(t, refused.count("ready"))
	require.Contains(t, strings.Join(refused.logs, "\n"), "replica(s) old are live in schema",
		"this release says why it does not migrate")
	require.Equal(t, migrated, c.migrations(t), "and migrates nothing")

	a.signal(t, syscall.SIGKILL)
	<-a.exited
	require.True(t, pgtest.Poll(time.Minute, 100*time.Millisecond, func() bool { // nothing announces staleness
		replicas, err := c.store.Replicas(context.Background())
		require.NoError(t, err)
		return len(replicas) == 1 && replicas[0].Stale
	}), "the killed replica goes stale")
	b := c.startBinary(t, "new", os.Args[0])
	b.waitFor(t, "its rounds", func(w *worker) bool { return w.count("load ok ") >= deployRounds })

	late := c.launch(t, "old-late", old)
	<-late.exited
	require.Zero(t, late.count("ready"))
	require.Contains(t, strings.Join(late.logs, "\n"), persistence.ErrReleaseRetired.Error(),
		"the previous release refuses the migrated schema")

	b.stop(t)
	require.Zero(t, b.count("load error "), "replica of this release: %v", b.errors())
	// What the stop left to run, a replica of this release drains.
	c.cfg.Clients, c.cfg.ServeLoad = 0, true
	c.start(t, "drain")
	c.auditLoad(t)
	var abandoned []persistence.Computation
	require.NoError(t, c.store.DB().NewRaw(c.q(`SELECT id, replica_id, error FROM ?.computations WHERE state = 'ABANDONED'`)).
		Scan(context.Background(), &abandoned))
	for _, a := range abandoned {
		require.Equal(t, "old", *a.ReplicaID, "only the killed replica's attempts were abandoned")
		require.Equal(t, persistence.ReasonReplica("old"), *a.Error)
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
// succeeded once, and that none failed. A stop may come between a client's Start and its Set.
func (c *cluster) auditLoad(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c.waitDone(t, 1, time.Minute)
	var executions, done int
	err := c.store.DB().QueryRowContext(ctx, c.q(`SELECT count(*), count(d.value) FROM ?.executions e
		JOIN ?.nodes b ON b.execution_id = e.id AND b.node = 'b' AND b.value IS NOT NULL
		LEFT JOIN ?.nodes d ON d.execution_id = e.id AND d.node = 'double' AND d.value IS NOT NULL
		WHERE e.graph_name = 'load'`)).Scan(&executions, &done)
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
		persistence.StateFailed} {
		require.Zero(t, counts[state], "attempts %s: %v", state, counts)
	}
}
