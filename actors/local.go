package actors

import (
	"sync"

	"github.com/journey-go/journey/persistence"
)

// Local is the persistence.Local of one replica: it lets the writes of this replica (Start, Set)
// claim the attempts they make ready, as far as the dispatcher has free workers, and hands them to
// the dispatcher once they have committed, with no claim and no NOTIFY. Pass the same Local to the
// store and to the dispatcher.
type Local struct {
	replicaID string
	mu        sync.Mutex
	closed    bool
	done      chan struct{} // closed by Close
	free      int           // the workers the writes may reserve, as the dispatcher last published them
	reserved  int           // the reservations that the dispatcher has not settled yet
	send      func(localWork)
	// running is the dispatcher's count of the claimed attempts whose goroutine has not ended,
	// which a stop waits for: each reservation counts in it from Reserve, before Close, until it
	// is given back or its attempt's own goroutine counts instead.
	running *sync.WaitGroup
}

// localWork hands the dispatcher the attempts that a write claimed with reserved reservations:
// it spawns them, and ends the reservations. With neither, reservations were given back.
type localWork struct {
	claimed  []*persistence.Computation
	reserved int
}

// NewLocal returns the Local of replica replicaID. It reserves nothing until a dispatcher
// configured with it has started.
func NewLocal(replicaID string) *Local {
	return &Local{replicaID: replicaID, done: make(chan struct{})}
}

// ReplicaID implements persistence.Local.
func (l *Local) ReplicaID() string { return l.replicaID }

// Reserve implements persistence.Local.
func (l *Local) Reserve(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.send == nil {
		return 0
	}
	k := min(n, l.free-l.reserved)
	if k <= 0 {
		return 0
	}
	l.reserved += k
	l.running.Add(k)
	return k
}

// Handed implements persistence.Local.
func (l *Local) Handed(cs []*persistence.Computation, reserved int) {
	l.deliver(localWork{claimed: cs, reserved: reserved})
}

// Unreserve implements persistence.Local. The workers are free again at once; the dispatcher
// hears of it, in case it waits for the reservations to end.
func (l *Local) Unreserve(n int) {
	l.settle(n)
	l.running.Add(-n)
	l.deliver(localWork{})
}

func (l *Local) deliver(w localWork) {
	l.mu.Lock()
	send := l.send
	l.mu.Unlock()
	if send != nil { // always: a reservation was granted
		send(w)
	}
}

// Close makes Reserve reserve nothing more: the replica stops. The reservations granted are
// settled as before, and count among the running attempts until then.
func (l *Local) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.done)
	}
}

// Closed is closed once Close has been called.
func (l *Local) Closed() <-chan struct{} { return l.done }

// attach is called by the dispatcher as it starts, with what sends it a message, and its count
// of running attempts.
func (l *Local) attach(send func(localWork), running *sync.WaitGroup) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.send, l.running = send, running
}

// publish sets the workers that the writes may reserve.
func (l *Local) publish(free int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.free = free
}

// hold returns the workers of free that no write has reserved, for a claim, and lets the writes
// reserve none until the dispatcher publishes again.
func (l *Local) hold(free int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.free = 0
	return free - l.reserved
}

// settle ends n reservations: their attempts were spawned, or none was made.
func (l *Local) settle(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reserved -= n
}

// outstanding counts the reservations not settled yet.
func (l *Local) outstanding() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reserved
}
