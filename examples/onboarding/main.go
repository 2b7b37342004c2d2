// Command onboarding runs journey's smallest graph end to end: two inputs, name and email, and a
// compute node, greeting, that runs once both are set.
//
//	go run ./examples/onboarding
//
// It uses $DATABASE_URL when it is set. Otherwise it starts a throwaway PostgreSQL cluster from
// the local server binaries (apt-get install postgresql) and removes it when it ends. When
// $DATABASE_URL goes through a transaction pooler such as PgBouncer, $LISTEN_URL gives the
// direct connection for LISTEN (Config.ListenURL).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/devpg"
	"github.com/journey-go/journey/graph"
)

// onboarding is the graph: greeting runs once name and email are both set.
var onboarding = graph.MustNew("onboarding", "v1", []graph.Node{
	graph.Input("name"),
	graph.Input("email"),
	graph.Compute("greeting", graph.Needs("name", "email"),
		func(ctx context.Context, in graph.Values) (any, error) {
			return "Welcome, " + in.String("name") + " at " + in.String("email"), nil
		},
		graph.MaxAttempts(3), graph.AbandonAfter(time.Minute),
		graph.Heartbeat(10*time.Second, 30*time.Second)),
})

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(logger); err != nil {
		fmt.Fprintf(os.Stderr, "onboarding: %v\n", err)
		os.Exit(1)
	}
}

func run(logger *slog.Logger) (err error) {
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	url, stopDB, err := devpg.URLOrStart(ctx, logger)
	if err != nil {
		return fmt.Errorf("getting a database (set DATABASE_URL, or install the PostgreSQL server binaries): %w", err)
	}
	defer stopDB() // runs after rt.Stop
	rt, err := journey.New(ctx, journey.Config{
		DatabaseURL: url, ListenURL: os.Getenv("LISTEN_URL"), Graphs: []*graph.Graph{onboarding}, Logger: logger,
	})
	if err != nil {
		return err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if serr := rt.Stop(sctx); serr != nil && err == nil {
			err = fmt.Errorf("stopping the runtime: %w", serr)
		}
	}()
	return greet(ctx, os.Stdout, rt)
}

// greet starts an execution on rt, a runtime that serves onboarding, sets its inputs, waits for
// its greeting, and prints what it did to out. Its test passes it a journeytest runtime.
func greet(ctx context.Context, out io.Writer, rt *journey.Runtime) error {
	ex, err := rt.Start(ctx, onboarding)
	if err != nil {
		return fmt.Errorf("starting an execution: %w", err)
	}
	fmt.Fprintln(out, "execution:", ex.ID)

	rev, err := rt.Set(ctx, ex.ID, "name", "Mario")
	if err != nil {
		return fmt.Errorf("setting name: %w", err)
	}
	fmt.Fprintln(out, "set name  -> revision", rev)

	rev, err = rt.Set(ctx, ex.ID, "email", "mario@example.com")
	if err != nil {
		return fmt.Errorf("setting email: %w", err)
	}
	fmt.Fprintln(out, "set email -> revision", rev)

	v, err := rt.Get(ctx, ex.ID, "greeting", journey.WaitAny())
	if err != nil {
		return fmt.Errorf("waiting for the greeting: %w", err)
	}
	fmt.Fprintf(out, "greeting: %s (revision %d)\n", v.String(), v.Revision)

	summary, err := rt.Summarize(ctx, ex.ID)
	if err != nil {
		return fmt.Errorf("summarizing: %w", err)
	}
	fmt.Fprintln(out)
	fmt.Fprint(out, summary)
	return nil
}
