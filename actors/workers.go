package actors

import "github.com/asynkron/protoactor-go/actor"

// workers is the mailbox dispatcher of the computation actors and their watchdogs, which come
// and go by the thousand a second. protoactor's default dispatcher starts a goroutine each time
// a mailbox has messages to process, and each such goroutine grows its stack anew; workers hands
// the mailbox to one of its goroutines that waits idle, whose stack is grown already, and starts a
// goroutine, as the default does, when none waits. So a mailbox never queues behind another: an
// actor that blocks holds up nothing but itself, as with the default. Measured on the pair of
// actors of a computation alone, it takes a sixth less CPU.
type workers struct {
	idle chan func()
	stop chan struct{}
}

var _ actor.Dispatcher = (*workers)(nil)

// mailboxThroughput is how many messages a mailbox processes before it yields: protoactor's
// default.
const mailboxThroughput = 300

// newWorkers starts n goroutines that wait for mailboxes to process, until close.
func newWorkers(n int) *workers {
	w := &workers{idle: make(chan func()), stop: make(chan struct{})}
	for range n {
		go w.work()
	}
	return w
}

func (w *workers) work() {
	for {
		select {
		case fn := <-w.idle:
			fn()
		case <-w.stop:
			return
		}
	}
}

// Schedule implements actor.Dispatcher.
func (w *workers) Schedule(fn func()) {
	select {
	case w.idle <- fn:
	default:
		go fn()
	}
}

// Throughput implements actor.Dispatcher.
func (w *workers) Throughput() int { return mailboxThroughput }

// close ends the idle goroutines; mailboxes scheduled later get goroutines of their own.
func (w *workers) close() { close(w.stop) }
