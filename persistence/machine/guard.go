package machine

import (
	"errors"
	"fmt"

	"github.com/journey-go/journey/graph"
)

// errUserPanic marks the failure of a node whose user code, called by the store, panicked.
var errUserPanic = errors.New("panicked")

// recovered runs fn, user code named by what, and turns a panic into an error that names it.
// A panic in a gate, key or backoff function of one node must fail that node, not the process:
// on every replica that advances the execution, and in every sweep, it would panic again.
func recovered[T any](what string, fn func() T) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s %w: %v", what, errUserPanic, p)
		}
	}()
	return fn(), nil
}

// holds evaluates a node's gate against vals, as recovered would, naming the gate only if it
// panics: it is evaluated for each node at each advance.
func holds(n graph.Node, vals graph.Values) (ok bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the gate of node %s %w: %v", quote(n.Name()), errUserPanic, p)
		}
	}()
	return n.Gate().Holds(vals), nil
}

func quote(s string) string { return fmt.Sprintf("%q", s) }
