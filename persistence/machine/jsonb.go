package machine

import (
	"bytes"
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
)

// jsonEqual reports whether two JSON texts are equal as PostgreSQL's jsonb compares them: an
// object's keys in any order (a repeated key keeps its last value), numbers by their value (1.0
// and 1 are equal), strings once their escapes are decoded. A write that stores a value equal to
// the stored one changes nothing, and the revisions of what depends on it stay: this is the rule
// that decides it, in Go, before any SQL. nil and empty are equal to each other, and to nothing
// else; a text that is not JSON equals only the same bytes.
func jsonEqual(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	if bytes.Equal(a, b) {
		return true
	}
	va, ok := decodeJSON(a)
	if !ok {
		return false
	}
	vb, ok := decodeJSON(b)
	return ok && jsonValuesEqual(va, vb)
}

// decodeJSON decodes one JSON text, its numbers as json.Number.
func decodeJSON(raw []byte) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return nil, false
	}
	return v, true
}

func jsonValuesEqual(a, b any) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case bool:
		bv, ok := b.(bool)
		return ok && a == bv
	case string:
		bv, ok := b.(string)
		return ok && a == bv
	case json.Number:
		bv, ok := b.(json.Number)
		return ok && numbersEqual(a, bv)
	case []any:
		bv, ok := b.([]any)
		if !ok || len(a) != len(bv) {
			return false
		}
		for i := range a {
			if !jsonValuesEqual(a[i], bv[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok || len(a) != len(bv) {
			return false
		}
		for k, v := range a {
			w, ok := bv[k]
			if !ok || !jsonValuesEqual(v, w) {
				return false
			}
		}
		return true
	}
	return false
}

// numbersEqual compares two JSON numbers by their value, exactly, as numeric does. A number whose
// exponent is beyond numeric's range (which PostgreSQL refuses to store) equals only itself: its
// exact value would take gigabytes.
func numbersEqual(a, b json.Number) bool {
	if a == b {
		return true
	}
	if hugeExponent(a) || hugeExponent(b) {
		return false
	}
	ra, ok := new(big.Rat).SetString(string(a))
	if !ok {
		return false
	}
	rb, ok := new(big.Rat).SetString(string(b))
	return ok && ra.Cmp(rb) == 0
}

// hugeExponent reports whether n's exponent is over numeric's 131,072 digits, or unreadable.
func hugeExponent(n json.Number) bool {
	i := bytes.IndexAny([]byte(n), "eE")
	if i < 0 {
		return false
	}
	e, err := strconv.ParseInt(strings.TrimPrefix(string(n[i+1:]), "+"), 10, 64)
	return err != nil || e > 1<<17 || e < -(1<<17)
}

// JSONEqual reports whether two JSON texts are equal as PostgreSQL's jsonb compares them (see
// jsonEqual): whether a write of b over a changes the value.
func JSONEqual(a, b []byte) bool { return jsonEqual(a, b) }
