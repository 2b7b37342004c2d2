package persistence

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/journey-go/journey/persistence/machine"
)

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
	err := machine.CheckString(s, maxNameBytes)
	if err == nil {
		return nil
	}
	quoted := strconv.Quote(machine.Prefix(s, 40))
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
