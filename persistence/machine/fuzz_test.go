package machine

import (
	"encoding/json"
	"testing"
)

// A signature read by hand reads what json.Unmarshal reads, whenever the hand reader takes it.
func FuzzParseSignature(f *testing.F) {
	for _, s := range []string{"", "{}", "null", `{"x": 1}`, `{"x":1,"y":-2}`, `{"a": 1, "bb": 22}`, `{"a\"b": 1}`,
		`{"x": }`, `{"x": 1.5}`, `{"x": 1} x`, `{"x": 1,}`, ` { "x" : 9223372036854775807 } `, `{"x": 99999999999999999999}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sig, ok := scanSignature(s)
		if !ok {
			return
		}
		want := signature{}
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatalf("scanSignature(%q) read %v, and json.Unmarshal refuses it: %v", s, sig, err)
		}
		if !sig.equal(want) {
			t.Fatalf("scanSignature(%q) = %v, json.Unmarshal: %v", s, sig, want)
		}
	})
}
