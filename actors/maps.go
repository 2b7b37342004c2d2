package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/persistence"
)

// errWaiting is what a map node's step returns when its attempt waits for its children
// (persistence.StateWaiting): the attempt ends here without an outcome.
var errWaiting = errors.New("waiting for the children")

// mapChildren is the function of a map node (graph.Map, graph.Child; see persistence/maps.go):
// the first time for its upstream values, it starts the children of the items and waits for
// them; once they have all ended, it returns their results. It returns errWaiting while they run,
// and persistence.ErrClaimLost if the attempt lost its claim.
func (a *computation) mapChildren(ctx context.Context, vals graph.Values) (any, error) {
	store, c, n := a.env.store, a.c, a.node
	progress, err := store.Progress(ctx, c)
	if err != nil {
		return nil, err
	}
	if !progress.Of(c) {
		items, err := a.items(vals)
		if err != nil {
			return nil, err
		}
		if progress != nil { // the children of the values before
			if _, err := store.EndChildren(ctx, c.ExecutionID, c.Node, c.ID, "node "+c.Node+" of the parent was computed again"); err != nil {
				return nil, err
			}
		}
		waiting, err := store.WaitChildren(ctx, c, n.ChildGraph(), items, c.ComputedWith)
		if err != nil || waiting {
			return nil, cmpErr(err, errWaiting)
		}
		if progress, err = store.Progress(ctx, c); err != nil {
			return nil, err
		}
	}
	for range 3 { // a child counted but not yet ended is counted again; one that ends meanwhile wakes it
		results, err := store.ChildResults(ctx, c.ExecutionID, c.Node, progress.Gen, n.Settings().Result)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(results, func(r *persistence.ChildResult) bool { return !r.Ended }) && len(results) >= progress.Total {
			return a.collect(results)
		}
		waiting, err := store.WaitChildren(ctx, c, n.ChildGraph(), nil, c.ComputedWith)
		if err != nil || waiting {
			return nil, cmpErr(err, errWaiting)
		}
	}
	return nil, fmt.Errorf("the children of node %q of %s were counted as ended, and were not: try again", c.Node, c.ExecutionID)
}

// cmpErr is err, or else other.
func cmpErr(err, other error) error {
	if err != nil {
		return err
	}
	return other
}

// items calls the node's function for the children's input values, and encodes and checks them.
// Bad items are a permanent failure: the same values give the same items.
func (a *computation) items(vals graph.Values) (out []map[string]json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the items function of %q panicked: %v", a.c.Node, r)
		}
	}()
	items, err := a.node.Each()(vals)
	if err != nil {
		return nil, err
	}
	child := a.node.ChildGraph()
	out = make([]map[string]json.RawMessage, len(items))
	for i, item := range items {
		out[i] = make(map[string]json.RawMessage, len(item))
		for _, name := range slices.Sorted(maps.Keys(item)) {
			if err := persistence.CheckInput(child, name); err != nil {
				return nil, graph.Permanent(fmt.Errorf("item %d of node %q: %w", i, a.c.Node, err))
			}
			raw, err := json.Marshal(item[name])
			if err == nil {
				err = persistence.CheckValue(raw, a.env.maxValueBytes)
			}
			if err != nil {
				return nil, graph.Permanent(fmt.Errorf("item %d of node %q: the value of input %q: %w", i, a.c.Node, name, err))
			}
			out[i][name] = raw
		}
	}
	return out, nil
}

// collect is the node's value once its children have ended: their results in order (for a Child,
// its one child's). A child that did not complete fails the node, for good, unless the node
// collects failures, which stand as {"failed": true, "execution": id, "error": text}.
func (a *computation) collect(results []*persistence.ChildResult) (any, error) {
	out := make([]any, len(results))
	for i, r := range results {
		if !r.Completed {
			if !a.node.Settings().CollectFailures {
				return nil, graph.Permanent(fmt.Errorf("child %s failed: %s", r.ID, r.Error))
			}
			out[i] = map[string]any{"failed": true, "execution": r.ID, "error": r.Error}
			continue
		}
		out[i] = json.RawMessage(r.Value)
		if r.Value == nil {
			out[i] = nil
		}
	}
	if a.node.One() {
		if len(out) != 1 {
			return nil, fmt.Errorf("node %q has %d children, not one", a.c.Node, len(out))
		}
		return out[0], nil
	}
	return out, nil
}
