package journeytest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// WaitValue waits until node has a value in execution id, and returns it. The wait is woken by
// the database's notifications. It fails the test if the node fails for good, or if no value
// comes within the timeout (DefaultTimeout).
func (r *Runtime) WaitValue(id, node string) graph.Value {
	r.t.Helper()
	ctx, cancel, patience := r.waitContext()
	defer cancel()
	v, err := r.Get(ctx, id, node, journey.WaitAny())
	switch {
	case err == nil:
		return v
	case errors.Is(err, journey.ErrComputationFailed):
		r.fatal(id, "node %q of execution %s failed instead of getting a value: %v", node, id, err)
	case ctx.Err() != nil:
		r.fatal(id, "node %q of execution %s has no value after %v", node, id, patience.Round(time.Millisecond))
	default:
		r.fatal(id, "waiting for node %q of execution %s: %v", node, id, err)
	}
	return graph.Value{}
}

// RequireValue waits until execution id is idle (see WaitIdle), then requires node's value to
// equal want. The two compare as JSON, the way the runtime stores values: want is encoded as Set
// would encode it, so 3 equals 3.0, a struct equals the object of its JSON fields, and the order of
// an object's keys does not matter. It fails the test if the node has no value, or another.
func (r *Runtime) RequireValue(id, node string, want any) {
	r.t.Helper()
	wantJSON, err := json.Marshal(want)
	if err != nil {
		r.t.Fatalf("journeytest: RequireValue: want (%T) is not JSON-encodable: %v", want, err)
	}
	r.WaitIdle(id)
	v, err := r.get(id, node)
	switch {
	case errors.Is(err, journey.ErrNotSet):
		r.fatal(id, "node %q of execution %s has no value, want %s", node, id, wantJSON)
	case err != nil:
		r.fatal(id, "node %q of execution %s has no value, want %s: %v", node, id, wantJSON, err)
	}
	if !sameJSON(v.Raw, wantJSON) {
		r.fatal(id, "node %q of execution %s is %s (revision %d), want %s", node, id, v.Raw, v.Revision, wantJSON)
	}
}

// RequireFailed waits until execution id is idle (see WaitIdle), then requires that node has
// failed for good (Get returns journey.ErrComputationFailed) with an error that matches target.
// A function's error is stored as text, so target matches if errors.Is says so, or if the stored
// error contains target's text: pass the sentinel the function returned, or errors.New with part
// of the message. A nil target matches any failure.
func (r *Runtime) RequireFailed(id, node string, target error) {
	r.t.Helper()
	r.WaitIdle(id)
	v, err := r.get(id, node)
	switch {
	case err == nil:
		r.fatal(id, "node %q of execution %s did not fail: it is %s (revision %d)", node, id, v.Raw, v.Revision)
	case errors.Is(err, journey.ErrNotSet):
		r.fatal(id, "node %q of execution %s did not fail, and has no value", node, id)
	case !errors.Is(err, journey.ErrComputationFailed):
		r.fatal(id, "node %q of execution %s did not fail: %v", node, id, err)
	case target != nil && !errors.Is(err, target) && !strings.Contains(err.Error(), target.Error()):
		r.fatal(id, "node %q of execution %s failed with an error that does not match %q: %v", node, id, target, err)
	}
}

// WaitIdle waits until execution id has nothing to do before the clock moves: no attempt is
// available or running, and none is pending that is due by the test's clock. A retry waiting for
// its backoff, or a tick that is not due, waits for Advance, and leaves the execution idle. It
// fails the test if the execution is still busy after the timeout (DefaultTimeout).
func (r *Runtime) WaitIdle(id string) {
	r.t.Helper()
	ctx, cancel, patience := r.waitContext()
	defer cancel()
	var busy []string // as last seen
	for {
		comps, err := r.Computations(ctx, id)
		switch {
		case err == nil:
			if busy = r.busy(comps); len(busy) == 0 {
				return
			}
		case ctx.Err() == nil:
			r.fatal(id, "waiting for execution %s to be idle: %v", id, err)
		}
		select {
		case <-ctx.Done():
			r.fatal(id, "execution %s is still busy after %v: %s", id, patience.Round(time.Millisecond), strings.Join(busy, "; "))
		case <-time.After(idlePoll):
		}
	}
}

// busy describes the attempts that keep an execution from being idle.
func (r *Runtime) busy(comps []journey.Computation) []string {
	now := r.clock.Now()
	var out []string
	for _, c := range comps {
		switch {
		case c.State == journey.StateAvailable || c.State == journey.StateRunning:
			out = append(out, fmt.Sprintf("%s attempt %d is %s", c.Node, c.Attempt, c.State))
		case c.State == journey.StatePending && !c.RunAt.After(now):
			out = append(out, fmt.Sprintf("%s attempt %d is %s and due", c.Node, c.Attempt, c.State))
		}
	}
	return out
}

// get reads node's value at once.
func (r *Runtime) get(id, node string) (graph.Value, error) {
	ctx, cancel, _ := r.waitContext()
	defer cancel()
	return r.Get(ctx, id, node)
}

// fatal fails the test with the message, followed by the execution's summary.
func (r *Runtime) fatal(id, format string, args ...any) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	summary, err := r.Summarize(ctx, id)
	if err != nil {
		summary = fmt.Sprintf("(no summary of the execution: %v)\n", err)
	}
	now := r.clock.Now()
	clock := fmt.Sprintf("Test clock: %s", now.Format(time.RFC3339Nano))
	if comps, err := r.Computations(ctx, id); err == nil {
		for _, c := range comps {
			if c.State == journey.StatePending && c.RunAt.After(now) {
				clock += fmt.Sprintf("\n  %s attempt %d is due in %v: Advance moves the clock", c.Node, c.Attempt, c.RunAt.Sub(now))
			}
		}
	}
	r.t.Fatalf("journeytest: %s\n\n%s\n%s", fmt.Sprintf(format, args...), strings.TrimRight(summary, "\n"), clock)
}

// sameJSON reports whether two JSON documents hold the same value.
func sameJSON(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}
