package graph

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// noopCompute is a ComputeFunc for graphs whose functions are never called.
func noopCompute(context.Context, Values) (any, error) { return nil, nil }

// noopTick is a TickFunc for graphs whose functions are never called.
func noopTick(context.Context, Values) (time.Time, error) { return time.Time{}, nil }

// noopOnSave is an OnSave callback that does nothing.
func noopOnSave(context.Context, SaveEvent) {}

// valuesOf builds Values holding the JSON encoding of each entry of m.
func valuesOf(t *testing.T, m map[string]any) Values {
	t.Helper()
	vals := make(Values, len(m))
	for name, x := range m {
		raw, err := json.Marshal(x)
		require.NoError(t, err)
		vals[name] = Value{Raw: raw, Revision: 1}
	}
	return vals
}
