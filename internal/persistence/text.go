package persistence

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxTextBytes caps a text that the store keeps from user code or from the network: an attempt's
// error, a delivery's send error. A longer one is cut, with a note of how many bytes were cut.
const maxTextBytes = 4 << 10

// cutNoteBytes is room enough for the note that storable puts after a text it cuts.
const cutNoteBytes = 40

// storable returns s as PostgreSQL text can hold it: each NUL character and each invalid UTF-8
// sequence replaced by U+FFFD, and cut to maxTextBytes at a character boundary. Text from user
// code or from the network goes through it before SQL: refusing it would lose what it reports,
// an attempt's failure or a delivery's.
func storable(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if len(s) <= maxTextBytes {
		return s
	}
	cut := maxTextBytes - cutNoteBytes
	for !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes cut)", s[:cut], len(s)-cut)
}
