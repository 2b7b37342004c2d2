package persistence

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
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
func checkKey(k string) error { return checkString(k, maxKeyBytes) }

// checkString reports why s cannot be PostgreSQL text of at most max bytes: it is longer, it is
// not valid UTF-8, or it holds a NUL character. The error says which, and where.
func checkString(s string, max int) error {
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

// maxNameBytes caps an id, a name or a filter's text given to look something up, or to go into
// a statement: no id or name the runtime stores is longer.
const maxNameBytes = 1 << 10

// ErrInvalidText means a string given to the store cannot reach PostgreSQL: a TextError says
// which, and why.
var ErrInvalidText = errors.New("journey: invalid text")

// TextError is a string refused before SQL: it holds a NUL character, is not valid UTF-8, or is
// longer than any id or name the runtime stores. Nothing was read or written.
type TextError struct {
	Field string // what the string is: "execution id", "node", "ListQuery.Graph", …
	Value string // the string, quoted and cut for the message
	Rule  string // why it was refused
}

func (e *TextError) Error() string {
	return fmt.Sprintf("%v: %s %s: %s; it must be valid UTF-8 with no NUL character, at most %d bytes",
		ErrInvalidText, e.Field, e.Value, e.Rule, maxNameBytes)
}

// Unwrap makes a TextError match ErrInvalidText.
func (e *TextError) Unwrap() error { return ErrInvalidText }

// CheckText returns a *TextError if s, named field, cannot go into SQL (see TextError).
func CheckText(field, s string) error {
	err := checkString(s, maxNameBytes)
	if err == nil {
		return nil
	}
	quoted := strconv.Quote(prefix(s, 40))
	if len(s) > 40 {
		quoted += "…"
	}
	return &TextError{Field: field, Value: quoted, Rule: err.Error()}
}

// checkTexts checks pairs of a field's name and its string, in order, and returns the first
// error.
func checkTexts(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := CheckText(pairs[i], pairs[i+1]); err != nil {
			return err
		}
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

// Unreachable reports whether err is the database out of reach rather than a statement's failure:
// a connection that could not be made or was lost (SQLSTATE class 08), or a server shutting down
// or restarting (class 57, operator intervention). Whatever was tried fails the same way until
// it is back, and nothing is wrong with it.
func Unreachable(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return strings.HasPrefix(pg.Code, "08") || strings.HasPrefix(pg.Code, "57P")
	}
	var connect *pgconn.ConnectError
	var netErr *net.OpError
	return errors.As(err, &connect) || errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, io.EOF) || pgconn.SafeToRetry(err)
}

// refusal says, readably, why PostgreSQL refused a write (see Refused).
func refusal(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return fmt.Sprintf("PostgreSQL refused it: %s (SQLSTATE %s)", pg.Message, pg.Code)
	}
	return err.Error()
}
