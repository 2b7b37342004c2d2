// Command approval runs two expense claims through an approval that waits for the world: for a
// manager's decision, with a deadline, and for time to pass before a reminder. It shows:
//
//   - an input node that a person sets later: the manager's decision, set with rt.Set whenever
//     it comes, from any replica;
//   - a durable sleep between two steps: the request goes to the manager, then a graph.TickOnce
//     comes due a day later (two seconds, for the demo), and the reminder follows it, unless the
//     manager has decided by then;
//   - a deadline: another graph.TickOnce, three days after the request (four seconds, for the
//     demo), and a node gated on graph.Or of the decision and the deadline, which decides from
//     the values which came first: an expense that no one approved in time is rejected.
//
// Nothing waits in memory: the due times of the reminder and of the deadline are stored, and any
// replica's sweeper advances the claim when one comes due, across restarts and redeploys. The
// tick functions take the time from journey.Now(ctx), so that the tests (main_test.go) run the
// same graph with days in it on journeytest's clock, and move the clock instead of waiting.
//
// Run it from the repository:
//
//	go run ./examples/approval
//
// It uses $DATABASE_URL when it is set. Otherwise it starts a throwaway PostgreSQL cluster from
// the local server binaries (apt-get install postgresql) and removes it when it ends.
package main

import (
	"context"
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

// The manager's decisions, the values of the decision node.
const (
	approved = "approved"
	rejected = "rejected"
)

// timedOut is the outcome of a claim on which the manager did not decide before the deadline.
const timedOut = "rejected: no decision in time"

// timing is when the approval reminds the manager, and when it gives up, counted from the
// request. The program runs with demoTiming; a real deployment and the tests, with days.
type timing struct {
	RemindAfter  time.Duration
	DecideWithin time.Duration
}

// demoTiming stands for a day and three days, in seconds, so that the program ends soon; the
// two seconds before the reminder leave room for the approval of the first claim on a busy machine.
var demoTiming = timing{RemindAfter: 2 * time.Second, DecideWithin: 4 * time.Second}

// approval is the graph. Its steps send messages through mail, so it is built with it.
func approval(mail *mailer, t timing) *graph.Graph {
	return graph.MustNew("expense-approval", "v1", []graph.Node{
		graph.Input("expense"),
		// Set by the application when the manager answers, in a minute or in a week.
		graph.Input("decision"),
		graph.Compute("ask_manager", graph.Needs("expense"), mail.askManager(t)),
		// The durable sleep between asking and reminding: the tick's value is the time it comes
		// due, stored with the execution, and nodes gated on it wait until then.
		graph.TickOnce("reminder_due", graph.Needs("ask_manager"), after(t.RemindAfter)),
		// Not(Provided("decision")): a manager who has decided gets no reminder.
		graph.Compute("remind_manager",
			graph.And(graph.Needs("reminder_due"), graph.Not(graph.Provided("decision"))),
			mail.remindManager),
		graph.TickOnce("deadline", graph.Needs("ask_manager"), after(t.DecideWithin)),
		// Whichever comes first: the decision, or the deadline.
		graph.Compute("outcome", graph.Or(graph.Provided("decision"), graph.Provided("deadline")), decide),
		graph.Compute("notify_employee", graph.Needs("outcome"), mail.notifyEmployee),
	}, graph.IDPrefix("EXP"), graph.CompletesWhen(graph.Needs("notify_employee")))
}

// after returns the function of a tick that comes due d after it runs. It reads the runtime's
// clock, journey.Now(ctx), rather than time.Now, so that a test that moves its clock by d makes
// the tick due.
func after(d time.Duration) graph.TickFunc {
	return func(ctx context.Context, _ graph.Values) (time.Time, error) {
		return journey.Now(ctx).Add(d), nil
	}
}

// decide is the function of the outcome node. Its gate holds once the decision is set or the
// deadline is due, and it runs again when the other one arrives; so it decides from the values
// alone which came first, and gives the same answer every time: an unchanged result writes
// nothing, and the employee is told once. The order in which the runtime gets to the two does
// not matter, even after a replica was down across the deadline.
//
// A function sees every value of the execution, a tick's included before it is due: the tick's
// value is its due time, in Unix milliseconds.
func decide(ctx context.Context, in graph.Values) (any, error) {
	decision, deadline := in["decision"], in["deadline"]
	inTime := !deadline.IsSet() || !decision.SetAt.After(time.UnixMilli(deadline.Int()))
	switch {
	case !decision.IsSet() || !inTime:
		return timedOut, nil
	case decision.String() == approved || decision.String() == rejected:
		return decision.String(), nil
	}
	return nil, graph.Permanent(fmt.Errorf("decision %s is neither %q nor %q", decision.Raw, approved, rejected))
}

// expense is a claim, the value of the expense node.
type expense struct {
	Employee string `json:"employee"`
	Cents    int64  `json:"cents"`
	For      string `json:"for"`
}

func (e expense) String() string {
	return fmt.Sprintf("%s's %d.%02d for %s", e.Employee, e.Cents/100, e.Cents%100, e.For)
}

// mailer sends the flow's messages. Here it prints them, and keeps them for the tests. The
// program prints through it too, so that the lines of the runtime's workers and of the program
// do not interleave.
type mailer struct {
	mu   sync.Mutex
	out  io.Writer
	sent []string
}

// printf prints a line.
func (m *mailer) printf(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fmt.Fprintf(m.out, format+"\n", args...)
}

// send sends a message, and returns what it sent, as the value of the node that sent it.
func (m *mailer) send(to, format string, args ...any) string {
	msg := "to " + to + ": " + fmt.Sprintf(format, args...)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, msg)
	fmt.Fprintln(m.out, "  "+msg)
	return msg
}

// messages returns the messages sent so far.
func (m *mailer) messages() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.sent...)
}

func (m *mailer) askManager(t timing) graph.ComputeFunc {
	return func(ctx context.Context, in graph.Values) (any, error) {
		var e expense
		if err := in.Decode("expense", &e); err != nil {
			return nil, graph.Permanent(err)
		}
		return m.send("the manager", "please approve %s within %v", e, t.DecideWithin), nil
	}
}

func (m *mailer) remindManager(ctx context.Context, in graph.Values) (any, error) {
	var e expense
	if err := in.Decode("expense", &e); err != nil {
		return nil, graph.Permanent(err)
	}
	return m.send("the manager", "reminder: %s waits for your decision", e), nil
}

func (m *mailer) notifyEmployee(ctx context.Context, in graph.Values) (any, error) {
	var e expense
	if err := in.Decode("expense", &e); err != nil {
		return nil, graph.Permanent(err)
	}
	return m.send(e.Employee, "your %d.%02d for %s is %s", e.Cents/100, e.Cents%100, e.For, in.String("outcome")), nil
}

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := runWithDatabase(logger); err != nil {
		fmt.Fprintf(os.Stderr, "approval: %v\n", err)
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

// run submits two claims in schema of the database at databaseURL: the manager approves the
// first at once, and never answers on the second, which is reminded, then rejected at the
// deadline.
func run(ctx context.Context, out io.Writer, logger *slog.Logger, databaseURL, schema string) (err error) {
	mail := &mailer{out: out}
	g := approval(mail, demoTiming)
	rt, err := journey.New(ctx, journey.Config{
		DatabaseURL: databaseURL,
		Schema:      schema,
		Graphs:      []*graph.Graph{g},
		Logger:      logger,
		// The sweeper advances the executions whose ticks came due, so its interval is their
		// precision: 5s by default, which is plenty for days, but not for the demo's seconds.
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

	// Ada's claim: the manager reads the request and approves it at once, so she gets no reminder.
	ada, err := submit(ctx, rt, g, mail, expense{Employee: "ada", Cents: 4200, For: "a train ticket"})
	if err != nil {
		return err
	}
	// Printed first: the employee may be told before Set returns.
	mail.printf("  the manager approves")
	if _, err := rt.Set(ctx, ada, "decision", approved); err != nil {
		return fmt.Errorf("approving: %w", err)
	}
	if err := waitOutcome(ctx, rt, ada); err != nil {
		return err
	}

	// Bob's claim: the manager never answers. The reminder comes after a day, the rejection after
	// three: the program only waits for the outcome, and the runtime does the rest.
	bob, err := submit(ctx, rt, g, mail, expense{Employee: "bob", Cents: 98000, For: "a conference pass"})
	if err != nil {
		return err
	}
	return waitOutcome(ctx, rt, bob)
}

// submit starts an approval of e, and waits until the manager has been asked.
func submit(ctx context.Context, rt *journey.Runtime, g *graph.Graph, mail *mailer, e expense) (string, error) {
	mail.printf("%s claims %d.%02d for %s", e.Employee, e.Cents/100, e.Cents%100, e.For)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"expense": e}))
	if err != nil {
		return "", fmt.Errorf("submitting the claim of %s: %w", e.Employee, err)
	}
	if _, err := rt.Get(ctx, ex.ID, "ask_manager", journey.WaitAny()); err != nil {
		return "", fmt.Errorf("waiting for the request to the manager: %w", err)
	}
	return ex.ID, nil
}

// waitOutcome waits until the employee has been told the outcome of the claim.
func waitOutcome(ctx context.Context, rt *journey.Runtime, id string) error {
	if _, err := rt.Get(ctx, id, "notify_employee", journey.WaitAny()); err != nil {
		return fmt.Errorf("waiting for the outcome of claim %s: %w", id, err)
	}
	return nil
}
