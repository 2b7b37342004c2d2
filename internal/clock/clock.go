// Package clock is the time source of every component that decides by time. Production code uses
// Real; tests use a Stub and move it, instead of sleeping until a sweep would fire.
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

// Stub is a clock that tests set and advance. Until Set is called it behaves like Real.
type Stub struct {
	mu sync.Mutex
	t  *time.Time
}

// NewStub returns a Stub stopped at t.
func NewStub(t time.Time) *Stub {
	s := &Stub{}
	s.Set(t)
	return s
}

// Set stops the clock at t.
func (s *Stub) Set(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t = t.UTC()
	s.t = &t
}

// Advance moves the stopped clock forward by d and returns the new time.
func (s *Stub) Advance(d time.Duration) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.t == nil {
		now := time.Now().UTC()
		s.t = &now
	}
	t := s.t.Add(d)
	s.t = &t
	return t
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
