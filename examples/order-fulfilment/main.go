// Command order-fulfilment runs three orders through a fulfilment flow: reserve the stock, charge
// the card, ship. It shows what a real flow reaches for:
//
//   - retries: the warehouse times out on the first reservation of order B-2001, and the runtime
//     tries again after a short backoff (graph.Backoff), up to graph.MaxAttempts;
//   - graph.Permanent: a declined card fails the payment at once, with no retry;
//   - graph.Failed: then the stock is given back by a compensation node in the graph, which
//     retries, is recorded and is tested like any other node;
//   - a graph.ConcurrencyKey per customer: one customer's payments run one at a time, on whichever
//     replica claims them, while other customers' run beside them;
//   - Config.OnExecutionCompleted and Config.OnExecutionFailed: the runtime reports each order's
//     outcome once, whatever the number of replicas.
//
// Run it from the repository:
//
//	go run ./examples/order-fulfilment
//
// It uses $DATABASE_URL when it is set. Otherwise it starts a throwaway PostgreSQL cluster from
// the local server binaries (apt-get install postgresql) and removes it when it ends.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/devpg"
	"github.com/journey-go/journey/graph"
)

const (
	// declinedCard is the card that the payment provider declines.
	declinedCard = "0002"
	// chargeTime is how long the payment provider takes to answer.
	chargeTime = 300 * time.Millisecond
	// retryAfter is the backoff before another attempt: short, for the demo.
	retryAfter = 200 * time.Millisecond
)

type order struct {
	ID, Customer, SKU, Card string
}

// orders are fulfilled at once, all three. Alice's two payments are ready together, and run one
// after the other; Bob's reservation is retried, and his card declined.
var orders = []order{
	{ID: "A-1001", Customer: "alice", SKU: "lamp", Card: "4242"},
	{ID: "A-1002", Customer: "alice", SKU: "desk", Card: "4242"},
	{ID: "B-2001", Customer: "bob", SKU: "chair", Card: declinedCard},
}

// fulfilment is the graph. Its functions call the warehouse and the payment provider, so it is
// built with them.
func fulfilment(w *warehouse, p *payments) *graph.Graph {
	backoff := graph.Backoff(func(int) time.Duration { return retryAfter })
	return graph.MustNew("order_fulfilment", "v1", []graph.Node{
		graph.Input("order"),
		graph.Input("customer"),
		graph.Input("sku"),
		graph.Input("card"),
		graph.Compute("reservation", graph.Needs("order", "sku"), w.reserve,
			graph.MaxAttempts(3), backoff),
		graph.Compute("payment", graph.Needs("reservation", "customer", "card"), p.charge,
			graph.MaxAttempts(3), backoff,
			graph.ConcurrencyKey(func(in graph.Values) string { return "customer:" + in.String("customer") })),
		graph.Compute("shipment", graph.Needs("payment"),
			func(ctx context.Context, in graph.Values) (any, error) {
				return "TRK-" + in.String("order"), nil
			}),
		// The compensation: it runs once the payment has failed for good.
		graph.Compute("restock", graph.And(graph.Failed("payment"), graph.Needs("reservation")), w.release,
			graph.MaxAttempts(5), backoff),
	}, graph.IDPrefix("ORD"), graph.CompletesWhen(graph.Provided("shipment")))
}

// warehouse reserves stock. It times out once on each order in flaky, as remote services do
// now and then.
type warehouse struct {
	mu    sync.Mutex
	flaky map[string]bool
}

func (w *warehouse) reserve(ctx context.Context, in graph.Values) (any, error) {
	id := in.String("order")
	w.mu.Lock()
	timeout := w.flaky[id]
	delete(w.flaky, id)
	w.mu.Unlock()
	if timeout {
		return nil, errors.New("warehouse timed out") // retried
	}
	return "RSV-" + id, nil
}

// release gives back the stock of a reservation whose payment failed for good. Its gate sees the
// failure, and so does it: in["payment"].Error is the payment's last error.
func (w *warehouse) release(ctx context.Context, in graph.Values) (any, error) {
	return fmt.Sprintf("released %s (%s)", in.String("reservation"), in["payment"].Error), nil
}

// payments charges cards, and records how many charges of each customer run at once.
type payments struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
}

func (p *payments) charge(ctx context.Context, in graph.Values) (any, error) {
	customer, card := in.String("customer"), in.String("card")
	p.mu.Lock()
	p.running[customer]++
	p.most[customer] = max(p.most[customer], p.running[customer])
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.running[customer]--
		p.mu.Unlock()
	}()

	select {
	case <-ctx.Done(): // the claim was lost, or the runtime stops
		return nil, ctx.Err()
	case <-time.After(chargeTime):
	}
	if card == declinedCard {
		return nil, graph.Permanent(fmt.Errorf("card %s declined", card)) // retrying cannot help
	}
	return "PAY-" + in.String("order"), nil
}

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := runWithDatabase(logger); err != nil {
		fmt.Fprintf(os.Stderr, "order-fulfilment: %v\n", err)
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

// run fulfils the orders in schema of the database at databaseURL, and prints how each went.
func run(ctx context.Context, out io.Writer, logger *slog.Logger, databaseURL, schema string) (err error) {
	w := &warehouse{flaky: map[string]bool{"B-2001": true}}
	p := &payments{running: map[string]int{}, most: map[string]int{}}
	g := fulfilment(w, p)

	// The handlers pass the events on to this goroutine. Returning an error would have the
	// event delivered again later.
	events := make(chan journey.ExecutionEvent, len(orders))
	notify := func(ctx context.Context, e journey.ExecutionEvent) error {
		select {
		case events <- e:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	rt, err := journey.New(ctx, journey.Config{
		DatabaseURL:          databaseURL,
		Schema:               schema,
		Graphs:               []*graph.Graph{g},
		Logger:               logger,
		OnExecutionCompleted: notify,
		OnExecutionFailed:    notify,
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

	inputs := make([]map[string]any, len(orders))
	for i, o := range orders {
		inputs[i] = map[string]any{"order": o.ID, "customer": o.Customer, "sku": o.SKU, "card": o.Card}
	}
	execs, err := rt.StartMany(ctx, g, inputs)
	if err != nil {
		return fmt.Errorf("starting the orders: %w", err)
	}

	// Wait for the outcome of every order. An event of an execution that this run did not
	// start, left over from an earlier run in the same schema, is not ours to report.
	outcomes := map[string]journey.ExecutionEvent{}
	for _, ex := range execs {
		outcomes[ex.ID] = journey.ExecutionEvent{}
	}
	for waiting := len(execs); waiting > 0; {
		select {
		case e := <-events:
			if prev, ours := outcomes[e.ExecutionID]; ours && prev.Type == "" {
				outcomes[e.ExecutionID] = e
				waiting--
			}
		case <-ctx.Done():
			return fmt.Errorf("waiting for the orders' outcomes: %w", ctx.Err())
		}
	}

	for i, o := range orders {
		if err := report(ctx, out, rt, o, outcomes[execs[i].ID]); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range slices.Sorted(maps.Keys(p.most)) {
		fmt.Fprintf(out, "payments of %s running at once, at most: %d\n", c, p.most[c])
	}
	return nil
}

// report prints an order's outcome and every attempt of its nodes, oldest first.
func report(ctx context.Context, out io.Writer, rt *journey.Runtime, o order, e journey.ExecutionEvent) error {
	switch e.Type {
	case journey.EventExecutionCompleted:
		tracking, err := journey.GetAs[string](ctx, rt, e.ExecutionID, "shipment")
		if err != nil {
			return fmt.Errorf("reading the shipment of order %s: %w", o.ID, err)
		}
		fmt.Fprintf(out, "order %s of %s: %s, shipped with tracking number %s\n", o.ID, o.Customer, e.Type, tracking)
	default:
		var failed []string
		for _, f := range e.FailedNodes {
			failed = append(failed, fmt.Sprintf("%s failed after %d attempt(s): %s", f.Node, f.Attempts, f.Error))
		}
		fmt.Fprintf(out, "order %s of %s: %s, %s\n", o.ID, o.Customer, e.Type, strings.Join(failed, "; "))
		// The failure event comes as the payment fails; the compensation runs after it.
		restocked, err := journey.GetAs[string](ctx, rt, e.ExecutionID, "restock", journey.WaitAny())
		if err != nil {
			return fmt.Errorf("waiting for the stock of order %s to be given back: %w", o.ID, err)
		}
		fmt.Fprintf(out, "  stock %s\n", restocked)
	}
	attempts, err := rt.Computations(ctx, e.ExecutionID)
	if err != nil {
		return fmt.Errorf("reading the attempts of order %s: %w", o.ID, err)
	}
	for _, c := range attempts {
		line := fmt.Sprintf("  %-11s attempt %d of %d: %s", c.Node, c.Attempt, c.MaxAttempts, c.State)
		if c.Error != "" {
			line += ", " + c.Error
		}
		fmt.Fprintln(out, line)
	}
	return nil
}
