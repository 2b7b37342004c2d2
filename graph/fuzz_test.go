package graph

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// A graph built from any names, gates and options either validates, with every node under its
// name, or fails with ErrInvalidGraph, one problem a line, each naming the graph (and the node,
// where there is one). It never panics.
func FuzzNew(f *testing.F) {
	f.Add("shop", "v1", "order", "charge", "receipt", uint8(0), 3, int64(time.Second), int64(3*time.Second))
	f.Add("", "", "", "a\x00", "\xff", uint8(1), -1, int64(-5), int64(0))
	f.Add("g", "v", "x", "x", "y", uint8(2), 0, int64(time.Hour), int64(time.Second))
	f.Add("g h", "v/1", "a b", "b", "c", uint8(3), 1, int64(0), int64(0))
	f.Fuzz(func(t *testing.T, name, version, n1, n2, n3 string, shape uint8, attempts int, interval, timeout int64) {
		fn := func(ctx context.Context, in Values) (any, error) { return nil, nil }
		opts := []NodeOption{MaxAttempts(attempts), Heartbeat(time.Duration(interval), time.Duration(timeout))}
		nodes := []Node{Input(n1)}
		switch shape % 4 {
		case 0: // a chain
			nodes = append(nodes, Compute(n2, Needs(n1), fn, opts...), Compute(n3, Needs(n2), fn))
		case 1: // perhaps a cycle
			nodes = append(nodes, Compute(n2, Needs(n3), fn, opts...), Compute(n3, Not(Provided(n2)), fn))
		case 2: // a mutate of an input
			nodes = append(nodes, Mutate(n2, Needs(n1), fn, []string{n3}, opts...), Input(n3))
		case 3: // a historian and an archive
			nodes = append(nodes, Historian(n2, Needs(n1, n3), opts...), Archive(n3, Needs(n1)))
		}
		g, err := New(name, version, nodes)
		if err == nil {
			for _, n := range []string{n1, n2, n3} {
				if _, ok := g.Node(n); !ok {
					t.Fatalf("the valid graph has no node %q", n)
				}
			}
			return
		}
		if !errors.Is(err, ErrInvalidGraph) {
			t.Fatalf("New failed with %v, which is not ErrInvalidGraph", err)
		}
		for _, line := range strings.Split(err.Error(), "\n") {
			if !strings.HasPrefix(line, "graph ") {
				t.Fatalf("a problem that does not name the graph: %q", line)
			}
		}
	})
}

// A value's accessors and its decoding take any stored text without a panic, and a value they
// encode decodes to itself.
func FuzzValue(f *testing.F) {
	for _, s := range []string{`"a"`, `12`, `1e400`, `-0`, `true`, `null`, `{"a":[1,2]}`, ``, `"\ud800"`, `9223372036854775808`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v := Value{Raw: raw}
		_, _, _, _ = v.String(), v.Int(), v.Float(), v.Bool()
		var decoded any
		if err := v.Decode(&decoded); err != nil || !json.Valid(raw) {
			return
		}
		again, err := json.Marshal(decoded)
		if err != nil {
			t.Fatalf("%q decoded to %#v, which does not encode: %v", raw, decoded, err)
		}
		var twice any
		if err := (Value{Raw: again}).Decode(&twice); err != nil {
			t.Fatalf("%q, encoded again as %q, does not decode: %v", raw, again, err)
		}
	})
}
