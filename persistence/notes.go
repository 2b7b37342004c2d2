package persistence

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// notesTimeout bounds one transaction of notes.
	notesTimeout = 5 * time.Second
	// notesGap is the least time between the starts of two transactions of notes. Each costs a
	// transaction, and one more in every listening session, which reads the notifications in a
	// transaction of its own: at 1,000 executions/s, sent as they came, the notes were 0.87
	// transactions per computation, and as many again in the listener. A replica's own waiters
	// and dispatcher are told by the writer itself; the gap delays only the other replicas.
	notesGap = 5 * time.Millisecond
)

// notes sends the NOTIFYs of the writes once they have committed, in transactions of their own
// that do not wait for the WAL to reach the disk.
//
// A NOTIFY sent in a write's own transaction costs every notifying writer a turn: PostgreSQL
// holds the lock that orders notifications from the commit until its WAL flush, so with fsync on,
// those commits flush one after another. At 1,000 executions/s, that lock capped journey bench at
// 257 computations/s. Here the writes commit without it, and what they announce goes in one
// statement whose commit waits for no flush: whatever gathered while the last one was sent.
//
// A notification only wakes: the dispatchers poll, and the waiters look again, so one lost with
// a crash between the commit and its NOTIFY delays, and loses nothing.
type notes struct {
	s       *Store
	mu      sync.Mutex
	pending []string
	queued  map[string]bool // the payloads in pending
	sending bool            // a goroutine sends them
	last    time.Time       // when the last transaction of notes began
	idle    *sync.Cond      // signalled when sending ends
}

func newNotes(s *Store) *notes {
	n := &notes{s: s, queued: map[string]bool{}}
	n.idle = sync.NewCond(&n.mu)
	return n
}

// send queues payloads, each once, and starts a goroutine to send them unless one runs.
func (n *notes) send(payloads []string) {
	if len(payloads) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range payloads {
		if !n.queued[p] {
			n.queued[p] = true
			n.pending = append(n.pending, p)
		}
	}
	if !n.sending {
		n.sending = true
		go n.run()
	}
}

// run sends what is pending until nothing is, notesGap apart.
func (n *notes) run() {
	for {
		n.mu.Lock()
		if wait := time.Until(n.last.Add(notesGap)); wait > 0 {
			n.mu.Unlock()
			time.Sleep(wait) // what comes meanwhile goes in the same transaction
			n.mu.Lock()
		}
		n.last = time.Now()
		batch := n.pending
		n.pending, n.queued = nil, map[string]bool{}
		if len(batch) == 0 {
			n.sending = false
			n.idle.Broadcast()
			n.mu.Unlock()
			return
		}
		n.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), notesTimeout)
		err := withPgx(ctx, n.s.workDB(), func(pg *pgx.Conn) error {
			_, err := pg.Exec(ctx, n.s.q(`SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p
				WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL`), n.s.channel, batch)
			return err
		})
		cancel()
		if err != nil {
			n.s.logger.Warn("sending notifications failed; the dispatchers' poll and the waiters' next look cover them",
				"error", err, "notifications", len(batch))
		}
	}
}

// wait returns once nothing is queued or being sent.
func (n *notes) wait() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for n.sending {
		n.idle.Wait()
	}
}

// NotesSent returns once the notifications of the writes committed so far have been sent (or
// have failed to be).
func (s *Store) NotesSent() { s.notes.wait() }

// Stop ends the store's goroutines: it drops what writes in applications' transactions that have
// not ended wait for (see callerCommits), and returns once the notifications of the writes
// committed so far have been sent. A stopping replica calls it last, before its pool closes.
func (s *Store) Stop() {
	s.callers.stop()
	s.notes.wait()
}
