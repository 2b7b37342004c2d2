package persistence

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// What a caller, a CLI flag or a dashboard query gives is parsed and checked without a panic,
// and what passes can reach PostgreSQL. The seeds run in every go test; make fuzz explores.

func FuzzCheckText(f *testing.F) {
	for _, s := range []string{"", "ada", "a\x00b", "\xff", "é", strings.Repeat("x", maxNameBytes+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := CheckText("field", s)
		storable := utf8.ValidString(s) && !strings.ContainsRune(s, 0) && len(s) <= maxNameBytes
		if (err == nil) != storable {
			t.Fatalf("CheckText(%q) = %v, but storable is %v", s, err, storable)
		}
		if err != nil && !strings.Contains(err.Error(), "invalid text: field ") {
			t.Fatalf("the error does not name the field: %v", err)
		}
	})
}

func FuzzCheckValue(f *testing.F) {
	for _, s := range []string{`"a"`, `"\u0000"`, `"\\u0000"`, `{"k":["\u0000"]}`, "\"\xff\"", `1`, `"\\\u0000"`, `1E700`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) || CheckValue(raw, 0) != nil {
			return
		}
		// What passes holds no NUL once decoded, and is valid UTF-8, as jsonb requires. Numbers
		// stay text: jsonb keeps 1E700, which a float64 cannot.
		var v any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("valid JSON %q did not decode: %v", raw, err)
		}
		if !utf8.Valid(raw) || strings.ContainsRune(decodedText(v), 0) {
			t.Fatalf("CheckValue passed %q, which jsonb refuses", raw)
		}
	})
}

// decodedText joins the strings and keys of a decoded JSON value.
func decodedText(v any) string {
	var b strings.Builder
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			b.WriteString(v)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for k, e := range v {
				b.WriteString(k)
				walk(e)
			}
		}
	}
	walk(v)
	return b.String()
}

func FuzzParseWhere(f *testing.F) {
	for _, s := range []string{"email=ada@example.com", "amount=10", "=x", "x", "n={\"a\":1}", "n=\x00", "a=b=c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		filter, err := ParseWhere(s)
		if err != nil {
			return
		}
		if filter.Node == "" || !strings.HasPrefix(s, filter.Node+"=") || !json.Valid(filter.Value) {
			t.Fatalf("ParseWhere(%q) = %+v", s, filter)
		}
	})
}

func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"2025-01-02T15:04:05.123456Z,EXEC1", ",", "2025-01-02T15:04:05Z,\x00", "x,y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCursor(s)
		if err != nil {
			return
		}
		if c.ID == "" || CheckText("cursor", c.ID) != nil || c.String() == "" {
			t.Fatalf("ParseCursor(%q) = %+v", s, c)
		}
	})
}
