package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/journey-go/journey/devpg"
	"github.com/journey-go/journey/migrations"
)

const devDescription = `Without a command, dev starts a throwaway PostgreSQL, prints its URL, and stops it (deleting
all its data) on SIGINT or SIGTERM.

With a command, dev starts a throwaway PostgreSQL, runs the command with DATABASE_URL and
TEST_DATABASE_URL set to its URL, stops it, and exits with the command's exit code. If
DATABASE_URL is already set, dev just runs the command.

With -durable, the PostgreSQL is journey bench's own: its durable defaults (fsync,
synchronous_commit and full_page_writes on) and pg_stat_statements loaded. A peer's benchmark
runs on it beside journey bench on equal terms (journey dev -durable -- river bench ...).

With --ui, dev also migrates -schema and serves the web dashboard of that schema (see journey ui
-h) while the database runs, on --ui-addr.`

// runDev implements "journey dev".
func runDev(ctx context.Context, env *environment, args []string) (code int) {
	fs := newFlagSet(env, "dev", "[--ui [--ui-addr host:port] [-schema name]] [-- command [args...]]", devDescription)
	ui := fs.Bool("ui", false, "serve the web dashboard too")
	schema := fs.String("schema", "journey", "with --ui, the `schema` to migrate and show")
	durable := fs.Bool("durable", false, "start journey bench's PostgreSQL: durable (fsync, synchronous_commit and "+
		"full_page_writes on) and with pg_stat_statements, instead of the tests'")
	uf := addUIFlags(fs, "ui-addr")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	argv := fs.Args()

	// From here on, signals are ours to handle: the cluster must be stopped whatever happens.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	if len(argv) > 0 && os.Getenv("DATABASE_URL") != "" {
		env.logger.Info("DATABASE_URL is set: running the command against it")
		if *ui {
			stopUI, ok := devUI(ctx, env, os.Getenv("DATABASE_URL"), *schema, uf)
			if !ok {
				return 1
			}
			defer stopUI()
		}
		return runCommand(env, argv, nil, sigs)
	}

	cluster, code, ok := startCluster(ctx, env, sigs, *durable)
	if !ok {
		return code
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintf(env.stderr, "journey dev: stopping PostgreSQL: %v\n", err)
			code = 1
		}
	}()

	if *ui {
		stopUI, ok := devUI(ctx, env, cluster.URL(), *schema, uf)
		if !ok {
			return 1
		}
		defer stopUI()
	}
	if len(argv) == 0 {
		fmt.Fprintf(env.stdout, "PostgreSQL is running at %s\n\n", cluster.URL())
		fmt.Fprintf(env.stdout, "    export DATABASE_URL='%s'\n\n", cluster.URL())
		fmt.Fprintln(env.stdout, "Press Ctrl-C to stop it and delete its data.")
		<-sigs
		return 0
	}
	url := cluster.URL()
	return runCommand(env, argv, []string{"DATABASE_URL=" + url, "TEST_DATABASE_URL=" + url}, sigs)
}

// devUI migrates schema at url and serves its dashboard in the background. It returns a function
// that stops it, and false if it could not start.
func devUI(ctx context.Context, env *environment, url, schema string, uf uiFlags) (func(), bool) {
	db, err := openDB(url)
	if err == nil {
		_, err = migrations.Migrate(ctx, db, schema, env.logger)
		_ = db.Close()
	}
	if err != nil {
		fmt.Fprintf(env.stderr, "journey dev: migrating schema %s for the dashboard: %v\n", schema, err)
		return nil, false
	}
	ctx, cancel := context.WithCancel(ctx)
	started, served := make(chan bool, 1), make(chan struct{})
	go func() {
		defer close(served)
		started <- serveUI(ctx, env, "dev", url, schema, uf, func() { started <- true }) == 0
	}()
	if !<-started {
		cancel()
		<-served
		return nil, false
	}
	return func() { cancel(); <-served }, true
}

// startCluster starts a cluster, durable or tuned for tests, giving up if a signal arrives
// first. When it returns false, the command should exit with code.
func startCluster(ctx context.Context, env *environment, sigs <-chan os.Signal, durable bool) (*devpg.Cluster, int, bool) {
	type result struct {
		cluster *devpg.Cluster
		err     error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan result, 1)
	go func() {
		var c *devpg.Cluster
		var err error
		if durable {
			c, err = startBenchCluster(ctx, env.logger, true)
		} else {
			c, err = devpg.Start(ctx, env.logger)
		}
		started <- result{c, err}
	}()

	select {
	case r := <-started:
		if r.err != nil {
			fmt.Fprintf(env.stderr, "journey dev: %v\n", r.err)
			return nil, 1, false
		}
		return r.cluster, 0, true
	case sig := <-sigs:
		cancel()
		if r := <-started; r.err == nil {
			_ = r.cluster.Stop()
		}
		return nil, signalCode(sig), false
	}
}

// runCommand runs argv with extra variables added to our environment and our standard streams,
// and returns its exit code.
//
// SIGTERM is passed on to the command. SIGINT is not: Ctrl-C in a terminal already reaches the
// command, which is in our process group, and a second one would make some programs quit
// without cleaning up. Either way we wait for the command to exit.
func runCommand(env *environment, argv, extraEnv []string, sigs <-chan os.Signal) int {
	//nolint:noctx // signals end the command, as the comment above says, not a context
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, env.stdout, env.stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(env.stderr, "journey dev: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return 127
		}
		return 126
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGTERM {
				_ = cmd.Process.Signal(sig)
			}
		case err := <-exited:
			return exitCode(env, err)
		}
	}
}

// exitCode turns what cmd.Wait returned into an exit code, as a shell would.
func exitCode(env *environment, err error) int {
	if err == nil {
		return 0
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		fmt.Fprintf(env.stderr, "journey dev: %v\n", err)
		return 1
	}
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return signalCode(ws.Signal())
	}
	return exitErr.ExitCode()
}

// signalCode is the exit code of a process killed by sig: 128 plus the signal number.
func signalCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}
