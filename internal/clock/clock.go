// Package clock is the time source of every component that decides by time. Production code uses
// Real; tests use a Stub and move it, instead of sleeping until a sweep would fire. A runtime on a
// Stub hears of each move (Mover), and does at once what the move made due.
//
// Deadlines are computed and compared in PostgreSQL with now(), so that clock skew between
// replicas cannot abandon live work. NowOrNil feeds the SQL `coalesce(?, now())`: nil means "the
// database's now()", and a stubbed time replaces it in tests.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time.
type Clock interface {
	// Now is the current time, for decisions made in Go.
	Now() time.Time
	// NowOrNil is nil when the database's now() should be used, or the stubbed time.
	NowOrNil() *time.Time
}

// Real is the wall clock. Its NowOrNil is always nil, so the database decides.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NowOrNil returns nil: the database's now() is authoritative.
func (Real) NowOrNil() *time.Time { return nil }

// Mover is a Clock that tests move, and that tells whoever runs on it of each move, so that what
// a move makes due (a tick, a retry's backoff, a deadline) happens at once rather than at the
// next interval. Real is not a Mover.
type Mover interface {
	Clock
	// OnMove registers fn, which is called after each move, and returns a function that
	// unregisters it.
	OnMove(fn func()) (remove func())
}

// Stub is a clock that tests set and advance. Until Set is called it behaves like Real.
type Stub struct {
	mu        sync.Mutex
	t         *time.Time
	observers map[*func()]struct{}
}

var _ Mover = (*Stub)(nil)

// NewStub returns a Stub stopped at t.
func NewStub(t time.Time) *Stub {
	s := &Stub{}
	s.Set(t)
	return s
}

// Set stops the clock at t. It returns once the functions registered with OnMove have run.
func (s *Stub) Set(t time.Time) {
	s.mu.Lock()
	t = t.UTC()
	s.t = &t
	s.mu.Unlock()
	s.moved()
}

// Advance moves the stopped clock forward by d and returns the new time. It returns once the
// functions registered with OnMove have run.
func (s *Stub) Advance(d time.Duration) time.Time {
	s.mu.Lock()
	if s.t == nil {
		now := time.Now().UTC()
		s.t = &now
	}
	t := s.t.Add(d)
	s.t = &t
	s.mu.Unlock()
	s.moved()
	return t
}

// OnMove registers fn, which Set and Advance call after each move, in the mover's goroutine, and
// returns a function that unregisters it.
func (s *Stub) OnMove(fn func()) (remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.observers == nil {
		s.observers = map[*func()]struct{}{}
	}
	key := &fn
	s.observers[key] = struct{}{}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.observers, key)
	}
}

// moved calls the registered functions, outside the lock, so that they may read the clock.
func (s *Stub) moved() {
	s.mu.Lock()
	fns := make([]func(), 0, len(s.observers))
	for fn := range s.observers {
		fns = append(fns, *fn)
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// Now returns the stubbed time, or time.Now() when unset.
func (s *Stub) Now() time.Time {
	if t := s.NowOrNil(); t != nil {
		return *t
	}
	return time.Now()
}

// NowOrNil returns the stubbed time, or nil when unset.
func (s *Stub) NowOrNil() *time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.t == nil {
		return nil
	}
	t := *s.t
	return &t
}
