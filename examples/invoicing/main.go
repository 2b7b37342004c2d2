// Command invoicing bills a list of customers on a schedule, each customer's invoice a child
// execution of its own. It shows:
//
//   - a schedule (Config.Schedules): the billing run starts itself at each fire time, once across
//     all replicas; every night at 02:00 in production ("0 2 * * *"), every two seconds for the
//     demo ("@every 2s");
//   - graph.Map: the run starts one execution of the invoice graph per customer, and its value is
//     the list of the invoices, in the customers' order, once every one of them has completed;
//   - graph.Result: the child's node whose value is a customer's result.
//
// The children are executions like any other: each is retried, survives a crash, and shows in
// `journey executions show` with a link to its run, which lists them with its progress.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/devpg"
	"github.com/journey-go/journey/graph"
)

// customer is one line of the billing run.
type customer struct {
	Name  string `json:"name"`
	Cents int    `json:"cents"`
}

// customers are the customers to bill, the schedule's values.
var customers = []customer{{"ada", 4200}, {"bob", 1750}, {"cy", 500}}

// invoiceGraph bills one customer: it completes once the invoice is sent.
func invoiceGraph() *graph.Graph {
	return graph.MustNew("invoice", "v1", []graph.Node{
		graph.Input("name"),
		graph.Input("cents"),
		graph.Compute("sent", graph.Needs("name", "cents"), func(ctx context.Context, in graph.Values) (any, error) {
			// A real one calls the billing provider with journey.IdempotencyKey(ctx), the same on
			// every attempt of this computation, so that a retry never bills twice.
			return fmt.Sprintf("%s %d.%02d", in.String("name"), in.Int("cents")/100, in.Int("cents")%100), nil
		}),
	}, graph.CompletesWhen(graph.Needs("sent")))
}

// runGraph is a billing run: an invoice per customer, then a report of them all.
func runGraph(invoice *graph.Graph, report func(string)) *graph.Graph {
	return graph.MustNew("billing_run", "v1", []graph.Node{
		graph.Input("customers"),
		graph.Map("invoices", graph.Needs("customers"), invoice, func(in graph.Values) ([]map[string]any, error) {
			var cs []customer
			if err := in.Decode("customers", &cs); err != nil {
				return nil, err
			}
			items := make([]map[string]any, len(cs))
			for i, c := range cs {
				items[i] = map[string]any{"name": c.Name, "cents": c.Cents}
			}
			return items, nil
		}, graph.Result("sent")),
		graph.Compute("report", graph.Needs("invoices"), func(ctx context.Context, in graph.Values) (any, error) {
			var sent []string
			if err := in.Decode("invoices", &sent); err != nil {
				return nil, err
			}
			return fmt.Sprintf("%d invoices: %s", len(sent), strings.Join(sent, ", ")), nil
		}, graph.OnSave(func(ctx context.Context, e graph.SaveEvent) {
			report(e.Value.String())
		})),
	}, graph.CompletesWhen(graph.Needs("report")))
}

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := runWithDatabase(logger); err != nil {
		fmt.Fprintf(os.Stderr, "invoicing: %v\n", err)
		os.Exit(1)
	}
}

// runWithDatabase runs the example on $DATABASE_URL, or on a throwaway cluster.
func runWithDatabase(logger *slog.Logger) error {
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	url, stopDB, err := devpg.URLOrStart(ctx, logger)
	if err != nil {
		return fmt.Errorf("getting a database (set DATABASE_URL, or install the PostgreSQL server binaries): %w", err)
	}
	defer stopDB() // runs after run has stopped the runtime
	return run(ctx, os.Stdout, logger, url, journey.DefaultSchema)
}

// runs is how many billing runs the demo waits for.
const runs = 2

// run serves the billing runs in schema of the database at databaseURL, and prints the report of
// the first two that the schedule starts.
func run(ctx context.Context, out io.Writer, logger *slog.Logger, databaseURL, schema string) (err error) {
	reports := make(chan string, runs)
	invoice := invoiceGraph()
	billing := runGraph(invoice, func(r string) {
		select {
		case reports <- r:
		default: // a run past the demo's
		}
	})
	rt, err := journey.New(ctx, journey.Config{
		DatabaseURL: databaseURL,
		Schema:      schema,
		Graphs:      []*graph.Graph{billing, invoice},
		Logger:      logger,
		Schedules: []journey.Schedule{{
			Name:   "nightly-billing",
			Graph:  billing,
			Cron:   "@every 2s", // "0 2 * * *" in production, with Location: the office's time zone
			Values: map[string]any{"customers": customers},
		}},
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
	fmt.Fprintf(out, "billing %d customers every 2s, an invoice each as a child execution\n", len(customers))
	for i := range runs {
		select {
		case r := <-reports:
			fmt.Fprintf(out, "run %d: %s\n", i+1, r)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
