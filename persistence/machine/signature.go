package machine

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/journey-go/journey/graph"
)

// signature is the upstream revisions a computation ran with.
type signature map[string]int64

// String encodes sig as json.Marshal does, keys sorted. It writes a signature of up to 8 plain
// names by hand, in one allocation, where json.Marshal made four: every attempt made writes one.
func (sig signature) String() string {
	var names [8]string
	keys := names[:0]
	for k := range sig {
		if len(keys) == len(names) || !plainName(k) {
			b, _ := json.Marshal(map[string]int64(sig)) // a map of int64 always encodes
			return string(b)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var buf [128]byte
	b := append(buf[:0], '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(append(b, '"'), k...), '"', ':')
		b = strconv.AppendInt(b, sig[k], 10)
	}
	return string(append(b, '}'))
}

// plainName reports whether json.Marshal writes name as it is, between quotes: printable ASCII
// that it neither escapes nor HTML-escapes.
func plainName(name string) bool {
	for i := range len(name) {
		if c := name[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// parseSignature reads a signature as String or PostgreSQL's jsonb writes it: a flat object of
// integers. It reads that form by hand, since the rules read a signature for every outcome and
// json.Unmarshal cost 14 allocations each (4% of a drain's); anything else, an escaped name
// say, goes to json.Unmarshal. An unreadable signature compares unequal.
func parseSignature(s string) signature {
	if sig, ok := scanSignature(s); ok {
		return sig
	}
	sig := signature{}
	_ = json.Unmarshal([]byte(s), &sig)
	return sig
}

// scanSignature reads s if it is a flat JSON object of integers with ASCII names free of escapes.
func scanSignature(s string) (signature, bool) {
	sig := make(signature, strings.Count(s, ":"))
	if !eachSignature(s, func(name string, rev int64) { sig[name] = rev }) {
		return nil, false
	}
	return sig, true
}

// sameSignature reports whether s, a signature as parseSignature reads it, is sig; it allocates
// nothing for a signature that scanSignature reads.
func sameSignature(s string, sig signature) bool {
	n, same := 0, true
	if !eachSignature(s, func(name string, rev int64) {
		n++
		if w, ok := sig[name]; !ok || w != rev {
			same = false
		}
	}) {
		return parseSignature(s).equal(sig)
	}
	return same && n == len(sig)
}

// computedWith reports whether s, a signature as parseSignature reads it, is Signature(n, vals),
// without making that: most advances find a node's attempt made from the values as they are.
func computedWith(s string, n graph.Node, vals graph.Values) bool {
	want := 0
	for up := range n.Upstreams() {
		if vals[up].IsSet() {
			want++
		}
	}
	seen, same := 0, true
	if !eachSignature(s, func(name string, rev int64) {
		seen++
		v := vals[name]
		same = same && v.IsSet() && v.Revision == rev && upstreamOf(n, name)
	}) {
		return sameSignature(s, Signature(n, vals))
	}
	return same && seen == want
}

// upstreamOf reports whether n's gate references name.
func upstreamOf(n graph.Node, name string) bool {
	for up := range n.Upstreams() {
		if up == name {
			return true
		}
	}
	return false
}

// eachSignature calls fn with each entry of s, and reports whether s is a flat JSON object of
// integers with ASCII names free of escapes (if not, fn may have seen some of its entries).
func eachSignature(s string, fn func(name string, rev int64)) bool {
	i := 0
	skip := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
	}
	expect := func(c byte) bool {
		skip()
		if i < len(s) && s[i] == c {
			i++
			return true
		}
		return false
	}
	if !expect('{') {
		return false
	}
	if expect('}') {
		skip()
		return i == len(s)
	}
	for {
		if !expect('"') {
			return false
		}
		start := i
		for i < len(s) && s[i] != '"' {
			if s[i] < 0x20 || s[i] >= 0x80 || s[i] == '\\' { // an escape, a control or UTF-8
				return false
			}
			i++
		}
		if i == len(s) {
			return false
		}
		name := s[start:i]
		i++
		if !expect(':') {
			return false
		}
		skip()
		start = i
		for i < len(s) && (s[i] == '-' || s[i] >= '0' && s[i] <= '9') {
			i++
		}
		digits := strings.TrimPrefix(s[start:i], "-")
		rev, err := strconv.ParseInt(s[start:i], 10, 64)
		if err != nil || len(digits) > 1 && digits[0] == '0' {
			return false
		}
		fn(name, rev)
		if expect('}') {
			skip()
			return i == len(s)
		}
		if !expect(',') {
			return false
		}
	}
}

func (sig signature) equal(other signature) bool {
	if len(sig) != len(other) {
		return false
	}
	for k, v := range sig {
		if w, ok := other[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Signature returns the revisions of n's upstream nodes that are set in vals.
func Signature(n graph.Node, vals graph.Values) map[string]int64 {
	sig := signature{}
	for up := range n.Upstreams() {
		if v, ok := vals[up]; ok && v.IsSet() {
			sig[up] = v.Revision
		}
	}
	return sig
}

// SameSignature reports whether two signatures, as an attempt's computed_with or a map node's
// progress keeps them, name the same upstream revisions.
func SameSignature(a, b string) bool { return sameSignature(a, parseSignature(b)) }

// CanonicalSignature is s, a signature, written as String writes it: the same upstream revisions
// always read the same.
func CanonicalSignature(s string) string { return parseSignature(s).String() }
