// Command subscription-renewal bills a subscription every billing cycle, with a recurring tick.
// It shows:
//
//   - graph.TickRecurring: the billing cycle comes due every second (a month, in real life), and
//     a payment attempt follows each time it does;
//   - pausing and resuming a recurring tick: when a payment is declined, the program pauses the
//     billing (the tick function returns the zero time) until the customer gives a new card;
//   - graph.Historian: a newest-first record of every payment attempt, kept in the execution;
//   - graph.Archive: once the customer cancels, the execution is archived when the last cycle
//     is paid.
//
// The payment node decides from the execution's values alone whether to charge, so that what
// is charged does not depend on how fast the program reacts: a declined card is not charged
// again, the overdue cycle is charged first on a new card, and nothing is charged after the last
// cycle.
//
// Run it from the repository:
//
//	go run ./examples/subscription-renewal
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
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/devpg"
	"github.com/journey-go/journey/graph"
)

const (
	// billingPeriod is the time between two billing cycles: short, for the demo.
	billingPeriod = time.Second
	// price is what a cycle costs, in cents.
	price = 1200
)

// subscription is the graph. The payment attempts call the card processor, so it is built
// with it.
func subscription(cards *processor) *graph.Graph {
	return graph.MustNew("subscription", "v1", []graph.Node{
		graph.Input("customer"),
		graph.Input("card"),
		graph.Input("active"),
		graph.Input("cancel_after_cycle"), // set when the customer cancels
		// The billing cycle is recomputed each time it comes due, and whenever active changes,
		// since its gate names it: returning the zero time pauses it.
		graph.TickRecurring("billing_cycle", graph.Needs("active"),
			func(ctx context.Context, in graph.Values) (time.Time, error) {
				if !in.Bool("active") {
					return time.Time{}, nil
				}
				return time.Now().Add(billingPeriod), nil
			}),
		// A payment attempt runs each time the billing cycle comes due. Its gate names only the
		// tick, so that a new card does not charge the customer by itself.
		graph.Compute("payment", graph.Needs("billing_cycle"), cards.bill),
		graph.Historian("payment_history", graph.Needs("payment"), graph.MaxEntries(24)),
		graph.Archive("archive", graph.When("payment", func(v graph.Value) bool {
			var p payment
			return v.Decode(&p) == nil && p.Final
		})),
	}, graph.IDPrefix("SUB"))
}

// payment is the outcome of one payment attempt, the value of the payment node. A declined
// card is an outcome, not an error: retrying it at once would not help.
type payment struct {
	Cycle    int64  `json:"cycle"`
	Card     string `json:"card"`
	Amount   int64  `json:"amount"`
	Declined string `json:"declined,omitempty"`
	// Final is true for the paid payment of the last cycle.
	Final bool `json:"final,omitempty"`
}

func (p payment) String() string {
	s := fmt.Sprintf("cycle %d: %d.%02d from card %s: ", p.Cycle, p.Amount/100, p.Amount%100, p.Card)
	switch {
	case p.Declined != "":
		return s + "declined, " + p.Declined
	case p.Final:
		return s + "paid, the last cycle"
	}
	return s + "paid"
}

// processor is the card processor: it pays from each card's funds, in cents, as long as they
// last.
type processor struct {
	mu    sync.Mutex
	funds map[string]int64
}

// bill is the payment node's function. It reads the card, the last cycle if the customer
// cancelled, and its own previous value, among the execution's values. Returning the previous
// value unchanged charges nothing and records nothing.
func (c *processor) bill(ctx context.Context, in graph.Values) (any, error) {
	var last payment
	if in.Has("payment") {
		if err := in.Decode("payment", &last); err != nil {
			return nil, err
		}
	}
	p := payment{Cycle: last.Cycle + 1, Card: in.String("card"), Amount: price}
	switch {
	case last.Final:
		return last, nil // the subscription has ended
	case last.Declined != "" && last.Card == p.Card:
		return last, nil // a declined card is not charged again: the cycle waits for a new one
	case last.Declined != "":
		p.Cycle = last.Cycle // the overdue cycle, on the new card
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.funds[p.Card] < p.Amount {
		p.Declined = "insufficient funds"
		return p, nil
	}
	c.funds[p.Card] -= p.Amount
	p.Final = in.Has("cancel_after_cycle") && p.Cycle >= in.Int("cancel_after_cycle")
	return p, nil
}

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := runWithDatabase(logger); err != nil {
		fmt.Fprintf(os.Stderr, "subscription-renewal: %v\n", err)
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

// run subscribes a customer in schema of the database at databaseURL, bills her until a payment
// is declined, pauses, resumes with a new card as she cancels, and prints the payment history
// once the last cycle is paid.
func run(ctx context.Context, out io.Writer, logger *slog.Logger, databaseURL, schema string) (err error) {
	// The first card holds two cycles' worth; the second, plenty.
	cards := &processor{funds: map[string]int64{"4242": 2 * price, "5555": 100 * price}}
	g := subscription(cards)
	rt, err := journey.New(ctx, journey.Config{
		DatabaseURL: databaseURL,
		Schema:      schema,
		Graphs:      []*graph.Graph{g},
		Logger:      logger,
		// The sweeper advances the ticks that came due, so its interval is their precision.
		SweepInterval: 100 * time.Millisecond,
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

	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{
		"customer": "ada", "card": "4242", "active": true,
	}))
	if err != nil {
		return fmt.Errorf("subscribing: %w", err)
	}
	fmt.Fprintln(out, "subscribed ada, billing card 4242 every cycle")

	// The program plays the dunning process: it pauses the billing after a declined payment.
	declined, err := waitDeclined(ctx, rt, ex.ID)
	if err != nil {
		return err
	}
	if _, err := rt.Set(ctx, ex.ID, "active", false); err != nil {
		return fmt.Errorf("pausing: %w", err)
	}
	if err := waitPaused(ctx, rt, ex.ID); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s; billing paused until the card is updated\n", declined)

	// Ada gives a new card, and cancels: her subscription ends after cycle 4.
	if _, err := rt.SetMany(ctx, ex.ID, map[string]any{"card": "5555", "cancel_after_cycle": 4, "active": true}); err != nil {
		return fmt.Errorf("resuming: %w", err)
	}
	fmt.Fprintln(out, "card updated to 5555, cancelled after cycle 4: billing resumed")

	if _, err := rt.Get(ctx, ex.ID, "archive", journey.WaitAny()); err != nil {
		return fmt.Errorf("waiting for the archive: %w", err)
	}
	if _, err := rt.Load(ctx, ex.ID); !errors.Is(err, journey.ErrNotFound) {
		return fmt.Errorf("loading the ended subscription: want ErrNotFound, since it is archived; got %w", err)
	}
	if e, err := rt.Load(ctx, ex.ID, journey.IncludeArchived()); err != nil || e.ArchivedAt == nil {
		return fmt.Errorf("loading the ended subscription with IncludeArchived: want it archived; got %+v, %w", e, err)
	}
	fmt.Fprintln(out, "last cycle paid: subscription archived, Load finds it only with IncludeArchived")
	return printHistory(ctx, out, rt, ex.ID)
}

// waitDeclined waits for a declined payment, and returns it.
func waitDeclined(ctx context.Context, rt *journey.Runtime, id string) (payment, error) {
	var rev int64
	for {
		var p payment
		v, err := rt.Get(ctx, id, "payment", journey.WaitNewerThan(rev))
		if err == nil {
			err = v.Decode(&p)
		}
		if err != nil {
			return p, fmt.Errorf("waiting for a payment attempt: %w", err)
		}
		if p.Declined != "" {
			return p, nil
		}
		rev = v.Revision
	}
}

// waitPaused waits until the billing cycle is paused: a recurring tick's value is 0 then.
func waitPaused(ctx context.Context, rt *journey.Runtime, id string) error {
	var rev int64
	for {
		v, err := rt.Get(ctx, id, "billing_cycle", journey.WaitNewerThan(rev))
		if err != nil {
			return fmt.Errorf("waiting for the billing to pause: %w", err)
		}
		if v.Int() == 0 {
			return nil
		}
		rev = v.Revision
	}
}

// historyEntry is one entry of a historian's value, which is a newest-first list of them.
type historyEntry struct {
	Node     string    `json:"node"`
	Value    payment   `json:"value"`
	Revision int64     `json:"revision"`
	At       time.Time `json:"at"`
}

// printHistory prints the payment attempts that the historian recorded, newest first.
func printHistory(ctx context.Context, out io.Writer, rt *journey.Runtime, id string) error {
	var entries []historyEntry
	v, err := rt.Get(ctx, id, "payment_history")
	if err == nil {
		err = v.Decode(&entries)
	}
	if err != nil {
		return fmt.Errorf("reading the payment history: %w", err)
	}
	fmt.Fprintln(out, "payment history, newest first:")
	for _, e := range entries {
		fmt.Fprintf(out, "  %s\n", e.Value)
	}
	return nil
}
