package persistence

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// maxTextBytes caps a text that the store keeps from user code or from the network: an attempt's
// error, a delivery's send error. A longer one is cut, with a note of how many bytes were cut.
const maxTextBytes = 4 << 10

// maxKeyBytes caps a concurrency key. Keys are indexed, and PostgreSQL refuses an index entry
// over about 2.7 kB.
const maxKeyBytes = 1 << 10

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
	kept := prefix(s, maxTextBytes-cutNoteBytes)
	return fmt.Sprintf("%s… (%d bytes cut)", kept, len(s)-len(kept))
}

// prefix returns the longest prefix of s, at most n bytes long, that ends between two characters.
func prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// checkKey reports why k, a concurrency key, cannot be stored: it is longer than maxKeyBytes, it
// is not valid UTF-8, or it holds a NUL character. The error says which; the caller names the key.
func checkKey(k string) error {
	if len(k) > maxKeyBytes {
		return fmt.Errorf("it is %d bytes long, over the limit of %d", len(k), maxKeyBytes)
	}
	for i := 0; i < len(k); {
		r, size := utf8.DecodeRuneInString(k[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return fmt.Errorf("it is not valid UTF-8 (byte %d is 0x%02x)", i, k[i])
		case r == 0:
			return fmt.Errorf("it holds a NUL character (byte %d)", i)
		}
		i += size
	}
	return nil
}

// Refused reports whether err is PostgreSQL refusing what a write holds, rather than failing to
// carry it out: a data exception (SQLSTATE class 22: a number out of range, an invalid byte
// sequence) or a program limit (class 54: an index entry too large). The same write would be
// refused again; trying it again cannot help. A lost connection, a restart, a deadlock or a
// timeout is not a refusal.
func Refused(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (strings.HasPrefix(pg.Code, "22") || strings.HasPrefix(pg.Code, "54"))
}

// refusal says, readably, why PostgreSQL refused a write (see Refused).
func refusal(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return fmt.Sprintf("PostgreSQL refused it: %s (SQLSTATE %s)", pg.Message, pg.Code)
	}
	return err.Error()
}
