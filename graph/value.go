package graph

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Value is the stored value of one node in an execution.
type Value struct {
	// Raw is the JSON encoding of the value. It is nil when the value is not set.
	Raw json.RawMessage
	// Revision is the execution revision at which the value was written.
	Revision int64
	// SetAt is when the value was written.
	SetAt time.Time
	// Metadata is the JSON metadata written with the value, if any.
	Metadata json.RawMessage
	// Failed is true while the node has failed for good: its newest attempt failed or was
	// abandoned with no attempt left, or returned a Permanent error. Error is that attempt's error.
	// A failed node keeps the value of an earlier success, if it had one, and has none otherwise:
	// Failed does not make it provided. Gates and functions see it (the Failed gate); Get does not.
	Failed bool   `json:",omitempty"`
	Error  string `json:",omitempty"`
}

// IsSet reports whether the value is set, that is whether Raw is not nil. A JSON null that was
// set on purpose counts as set.
func (v Value) IsSet() bool { return v.Raw != nil }

// Decode unmarshals the JSON value into dst, as json.Unmarshal does. It returns an error that
// matches ErrNotSet when the value is not set.
func (v Value) Decode(dst any) error {
	if !v.IsSet() {
		return fmt.Errorf("decoding value: %w", ErrNotSet)
	}
	if err := json.Unmarshal(v.Raw, dst); err != nil {
		return fmt.Errorf("decoding value: %w", err)
	}
	return nil
}

// String returns the value as text: a JSON string decoded, any other JSON value as its JSON
// text (such as `42`, `true` or `{"a":1}`), and "" when the value is not set.
func (v Value) String() string {
	if !v.IsSet() {
		return ""
	}
	raw := bytes.TrimSpace(v.Raw)
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// Int returns a JSON number as an int64, truncating any fraction. It returns 0 when the value
// is not set, is not a number, or does not fit in an int64.
func (v Value) Int() int64 {
	n, ok := v.number()
	if !ok {
		return 0
	}
	if i, err := n.Int64(); err == nil {
		return i
	}
	f, err := n.Float64()
	// float64(math.MaxInt64) rounds up to 2^63, which does not fit, hence the strict bound.
	if err != nil || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0
	}
	return int64(f)
}

// Float returns a JSON number as a float64. It returns 0 when the value is not set or is not
// a number.
func (v Value) Float() float64 {
	n, ok := v.number()
	if !ok {
		return 0
	}
	f, err := n.Float64()
	if err != nil {
		return 0
	}
	return f
}

// Bool returns true when the value is the JSON literal true, and false otherwise.
func (v Value) Bool() bool {
	return bytes.Equal(bytes.TrimSpace(v.Raw), []byte("true"))
}

// isFalse reports whether the value is the JSON literal false.
func (v Value) isFalse() bool {
	return bytes.Equal(bytes.TrimSpace(v.Raw), []byte("false"))
}

// number returns the value as a JSON number, if it is one: not a JSON string of a number, which
// json.Unmarshal into a json.Number would take too. It checks the JSON grammar itself, without
// json.Unmarshal, which took 3% of the CPU in journey bench's drain.
func (v Value) number() (json.Number, bool) {
	raw := bytes.TrimSpace(v.Raw)
	digits := func(i int) int { // the index after the digits from i
		for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
			i++
		}
		return i
	}
	i := 0
	if i < len(raw) && raw[i] == '-' {
		i++
	}
	switch {
	case i < len(raw) && raw[i] == '0':
		i++
	case i < len(raw) && raw[i] >= '1' && raw[i] <= '9':
		i = digits(i)
	default:
		return "", false
	}
	if i < len(raw) && raw[i] == '.' {
		if j := digits(i + 1); j > i+1 {
			i = j
		} else {
			return "", false
		}
	}
	if i < len(raw) && (raw[i] == 'e' || raw[i] == 'E') {
		i++
		if i < len(raw) && (raw[i] == '+' || raw[i] == '-') {
			i++
		}
		if j := digits(i); j > i {
			i = j
		} else {
			return "", false
		}
	}
	if i != len(raw) {
		return "", false
	}
	return json.Number(raw), true
}

// Values holds the values of an execution by node name. Only set values are expected in it,
// but a Value that is present and not set counts as not provided.
type Values map[string]Value

// Has reports whether the node's value is present and set. This is what "provided" means to
// gates.
func (vs Values) Has(name string) bool { return vs[name].IsSet() }

// Failed reports whether the node has failed for good; see Value.Failed.
func (vs Values) Failed(name string) bool { return vs[name].Failed }

// String returns the node's value as text; see Value.String.
func (vs Values) String(name string) string { return vs[name].String() }

// Int returns the node's value as an int64; see Value.Int.
func (vs Values) Int(name string) int64 { return vs[name].Int() }

// Float returns the node's value as a float64; see Value.Float.
func (vs Values) Float(name string) float64 { return vs[name].Float() }

// Bool reports whether the node's value is the JSON literal true; see Value.Bool.
func (vs Values) Bool(name string) bool { return vs[name].Bool() }

// Decode unmarshals the node's value into dst. The error names the node, and matches
// ErrNotSet when the value is not set.
func (vs Values) Decode(name string, dst any) error {
	v := vs[name]
	if !v.IsSet() {
		return fmt.Errorf("node %q: %w", name, ErrNotSet)
	}
	if err := json.Unmarshal(v.Raw, dst); err != nil {
		return fmt.Errorf("decoding node %q: %w", name, err)
	}
	return nil
}
