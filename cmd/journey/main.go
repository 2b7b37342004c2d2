// Command journey is the command-line tool of journey-go: it runs a throwaway PostgreSQL for
// development and tests, migrates a database, measures the runtime, and lets operators inspect
// and act on executions.
//
// Usage:
//
//	journey dev                       start PostgreSQL, print its URL, stop it on Ctrl-C
//	journey dev -- go test ./...      run a command against a throwaway PostgreSQL
//	journey migrate [-schema journey] apply pending migrations to $DATABASE_URL
//	journey bench -n 5000             measure throughput and latency (see journey bench -h)
//	journey graphs                    the graph versions served, with executions by state
//	journey executions list [flags]   executions, newest first, filtered and paged
//	journey executions show ID        everything about one execution
//	journey replicas                  the replicas, their heartbeats and what they run
//	journey schedules                 the schedules, their last and next fire times
//	journey retry ID NODE             retry a failed node (archive ID, unarchive ID alike)
//	journey ui [--addr 127.0.0.1:8233] the web dashboard (journey dev --ui serves it too)
//
// Run it from the module with go run ./cmd/journey.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/journey-go/journey/persistence"
)

// command is a subcommand of journey.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *environment, args []string) int
}

// environment is what a command reads and writes besides its arguments.
type environment struct {
	stdout, stderr io.Writer
	logger         *slog.Logger
	// getenv reads the environment: os.Getenv, or a test's own variables.
	getenv func(key string) string
}

var commands = []command{
	{name: "dev", summary: "run a throwaway PostgreSQL, alone or for one command", run: runDev},
	{name: "migrate", summary: "apply pending migrations to $DATABASE_URL", run: runMigrate},
	{name: "bench", summary: "measure throughput and latency, like river bench", run: runBench},
	{name: "graphs", summary: "list the graph versions, their replicas and executions by state", run: runGraphs},
	{name: "executions", summary: "list executions (list), or show one (show ID)", run: runExecutions},
	{name: "insights", summary: "where a graph's executions go and stop, and its work over time (GRAPH)", run: runInsights},
	{name: "replicas", summary: "list the replicas, their heartbeat age and what they run", run: runReplicas},
	{name: "schedules", summary: "list the schedules (Config.Schedules), their last and next fire times", run: runSchedules},
	{name: "retry", summary: "give a failed node a fresh attempt budget (ID NODE, or --graph G --node N for many)", run: runRetry},
	{name: "archive", summary: "archive an execution (ID)", run: runAction(persistence.ActionArchive)},
	{name: "pause", summary: "pause an execution (ID) or a graph version (--graph G --version V): nothing of it is claimed until resume", run: runPause(true)},
	{name: "resume", summary: "resume a paused execution (ID) or graph version (--graph G --version V)", run: runPause(false)},
	{name: "cancel", summary: "cancel an execution for good: stop its attempts (ID [-reason R])", run: runAction(persistence.ActionCancel)},
	{name: "unarchive", summary: "unarchive an execution (ID)", run: runAction(persistence.ActionUnarchive)},
	{name: "ui", summary: "serve the web dashboard on loopback (see journey ui -h)", run: runUI},
}

func main() {
	env := &environment{
		stdout: os.Stdout,
		stderr: os.Stderr,
		logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		getenv: os.Getenv,
	}
	os.Exit(run(context.Background(), env, os.Args[1:]))
}

// run runs the command line args and returns the exit code.
func run(ctx context.Context, env *environment, args []string) int {
	fs := flag.NewFlagSet("journey", flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() { usage(fs.Output()) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		usage(env.stderr)
		return 2
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	if name == "help" {
		usage(env.stdout)
		return 0
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(ctx, env, rest)
		}
	}
	fmt.Fprintf(env.stderr, "journey: unknown command %q\n\n", name)
	usage(env.stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `journey is the command-line tool of journey-go, durable computation graphs on PostgreSQL.

Usage:
  journey <command> [flags] [arguments]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run "journey <command> -h" for the flags of a command.

Examples:
  journey dev                          # start PostgreSQL and print its DATABASE_URL
  journey dev -- go test ./...         # run the tests against a throwaway PostgreSQL
  journey migrate -schema journey      # migrate the database at $DATABASE_URL
  journey bench -n 5000                # time one replica draining 5000 ready executions
  journey executions list --state failed
  journey executions show ID --json
  journey retry ID NODE                # a replica serving the graph runs NODE again
  journey ui                           # the web dashboard, on http://127.0.0.1:8233/
  journey dev --ui -- go run ./examples/onboarding
`)
}

// newFlagSet returns a flag set for a command, with its usage line and description.
func newFlagSet(env *environment, name, synopsis, description string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: journey %s %s\n\n%s\n", name, synopsis, description)
		var hasFlags bool
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprint(fs.Output(), "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses args into fs. It returns the exit code to return and false if the command
// should not run: 0 after -h, 2 after a bad flag.
func parseFlags(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}
