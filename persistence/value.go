package persistence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// nulEscape is how JSON writes a NUL character, which PostgreSQL's jsonb rejects.
var nulEscape = []byte(`u0000`)

// CheckValue reports why raw, a value's JSON encoding, cannot be stored: it is longer than
// maxBytes (no limit when maxBytes is zero or less), it holds a NUL character, or it is not valid
// UTF-8 (json.Marshal keeps a json.RawMessage's bytes as they are). The error says what the user
// can do; the caller names the value.
func CheckValue(raw json.RawMessage, maxBytes int) error {
	if maxBytes > 0 && len(raw) > maxBytes {
		return fmt.Errorf("it is %d bytes of JSON, over the limit of %d bytes: make it smaller, "+
			"or raise Config.MaxValueBytes", len(raw), maxBytes)
	}
	if hasNUL(raw) {
		return errors.New(`it holds a NUL character (\u0000), which PostgreSQL jsonb cannot store: ` +
			"remove it, or encode the data (as base64, say)")
	}
	if !utf8.Valid(raw) {
		return errors.New("it is not valid UTF-8, which PostgreSQL jsonb cannot store: " +
			"encode the data (as base64, say)")
	}
	return nil
}

// hasNUL reports whether the JSON text raw holds the escape \u0000. In valid JSON a backslash
// only starts an escape in a string, so skipping each escape's second character is enough to
// tell `\\u0000` (an escaped backslash, then "u0000") from a NUL.
func hasNUL(raw []byte) bool {
	for {
		i := bytes.IndexByte(raw, '\\')
		if i < 0 || i+1 >= len(raw) {
			return false
		}
		if bytes.HasPrefix(raw[i+1:], nulEscape) {
			return true
		}
		raw = raw[i+2:]
	}
}
