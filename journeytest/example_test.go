package journeytest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/journeytest"
)

// reminder sends a reminder an hour after the email is set. The tick takes the time from
// journey.Now(ctx), so that a test moves it.
var reminder = graph.MustNew("reminder", "v1", []graph.Node{
	graph.Input("email"),
	graph.TickOnce("in_an_hour", graph.Needs("email"),
		func(ctx context.Context, in graph.Values) (time.Time, error) {
			return journey.Now(ctx).Add(time.Hour), nil
		}),
	graph.Compute("reminder", graph.Needs("email", "in_an_hour"),
		func(ctx context.Context, in graph.Values) (any, error) {
			return "Reminder sent to " + in.String("email"), nil
		}),
})

// The body of this example is the body of a test, func TestReminder(t *testing.T). An Example
// gets no *testing.T, so it passes a stand-in of its own.
func Example() {
	t := &exampleT{}
	defer t.cleanup()
	ctx := context.Background()

	rt := journeytest.New(t, reminder)
	ex, err := rt.Start(ctx, reminder, journey.WithValues(map[string]any{"email": "mario@example.com"}))
	if err != nil {
		t.Fatalf("starting: %v", err)
	}
	rt.WaitIdle(ex.ID) // the tick has chosen its time: nothing runs until the clock moves
	due := time.UnixMilli(rt.WaitValue(ex.ID, "in_an_hour").Int())
	fmt.Println("the tick is due in", due.Sub(rt.Now()))

	rt.Advance(time.Hour) // no sleep: the tick fires at once
	fmt.Println(rt.WaitValue(ex.ID, "reminder").String())
	rt.RequireValue(ex.ID, "reminder", "Reminder sent to mario@example.com")
	// Output:
	// the tick is due in 1h0m0s
	// Reminder sent to mario@example.com
}

// exampleT stands in for the *testing.T that a test passes to journeytest.New. Its Fatalf panics,
// and its cleanups run when the example ends.
type exampleT struct{ cleanups []func() }

func (*exampleT) Helper()                         {}
func (*exampleT) Name() string                    { return "Example" }
func (t *exampleT) Cleanup(f func())              { t.cleanups = append(t.cleanups, f) }
func (*exampleT) Logf(format string, args ...any) {}
func (*exampleT) Errorf(format string, args ...any) {
	fmt.Printf(format+"\n", args...)
}
func (*exampleT) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

func (t *exampleT) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
