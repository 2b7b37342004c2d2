package graph

import "errors"

// ErrInvalidGraph is matched (with errors.Is) by every error that New returns. The error holds
// one problem per line, each naming the graph and, where there is one, the node.
var ErrInvalidGraph = errors.New("invalid graph")

// ErrNotSet is returned by Value.Decode and Values.Decode when the value is not set.
var ErrNotSet = errors.New("value not set")

// problem is one validation problem found by New. It reads as plain text and matches
// ErrInvalidGraph.
type problem struct{ msg string }

func (p *problem) Error() string { return p.msg }

// Is makes errors.Is(p, ErrInvalidGraph) hold.
func (p *problem) Is(target error) bool { return target == ErrInvalidGraph }

// permanentError marks an error a computation should not be retried for.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: a ComputeFunc or TickFunc that returns it fails the node at
// once, without using up its remaining attempts. errors.Is and errors.As still see err through
// the wrapper, and the message is unchanged. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil || IsPermanent(err) {
		return err
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}
