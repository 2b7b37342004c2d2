package machine

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxTextBytes caps a text that the store keeps from user code or from the network: an attempt's
// error, a delivery's send error. A longer one is cut, with a note of how many bytes were cut.
const MaxTextBytes = 4 << 10

// MaxKeyBytes caps a concurrency key. Keys are indexed, and PostgreSQL refuses an index entry
// over about 2.7 kB.
const MaxKeyBytes = 1 << 10

// cutNoteBytes is room enough for the note that storable puts after a text it cuts.
const cutNoteBytes = 40

// Storable returns s as PostgreSQL text can hold it: each NUL character and each invalid UTF-8
// sequence replaced by U+FFFD, and cut to MaxTextBytes at a character boundary. Text from user
// code or from the network goes through it before SQL: refusing it would lose what it reports,
// an attempt's failure or a delivery's.
func Storable(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if len(s) <= MaxTextBytes {
		return s
	}
	kept := Prefix(s, MaxTextBytes-cutNoteBytes)
	return fmt.Sprintf("%s… (%d bytes cut)", kept, len(s)-len(kept))
}

// Prefix returns the longest prefix of s, at most n bytes long, that ends between two characters.
func Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// CheckKey reports why k, a concurrency key, cannot be stored: it is longer than MaxKeyBytes, it
// is not valid UTF-8, or it holds a NUL character. The error says which; the caller names the key.
func CheckKey(k string) error { return CheckString(k, MaxKeyBytes) }

// CheckString reports why s cannot be PostgreSQL text of at most max bytes: it is longer, it is
// not valid UTF-8, or it holds a NUL character. The error says which, and where.
func CheckString(s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("it is %d bytes long, over the limit of %d", len(s), max)
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return fmt.Errorf("it is not valid UTF-8 (byte %d is 0x%02x)", i, s[i])
		case r == 0:
			return fmt.Errorf("it holds a NUL character (byte %d)", i)
		}
		i += size
	}
	return nil
}
