package actors

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// mailbox is the mailbox of the actors of a computation, which live for one attempt and get a
// handful of messages. protoactor's default mailbox takes four allocations to make (a ring and a
// linked queue, each with a first block), one for each system message it queues, and one each
// time it is scheduled (its method value): 27 of a computation's 129 allocations. This one is
// one allocation, its queues slices over arrays of its own until they hold more than four
// messages, and its processing bound once.
//
// It keeps the default's rules: system messages first; a SuspendMailbox holds the user messages
// until a ResumeMailbox; at most one goroutine processes it at a time, which yields after the
// dispatcher's throughput; a panic goes to the invoker's EscalateFailure.
type mailbox struct {
	mu           sync.Mutex
	sys, user    queue
	sysN, userN  atomic.Int32 // the messages queued, read without the lock
	scheduled    atomic.Bool
	suspended    atomic.Bool
	invoker      actor.MessageInvoker
	dispatcher   actor.Dispatcher
	process      func()
	sysArr, uArr [4]any
}

var _ actor.Mailbox = (*mailbox)(nil)

// newMailbox is an actor.MailboxProducer.
func newMailbox() actor.Mailbox {
	m := &mailbox{}
	m.sys.items, m.user.items = m.sysArr[:0], m.uArr[:0]
	m.process = m.processMessages
	return m
}

// queue is a FIFO over a slice, whose space is reused once it is empty.
type queue struct {
	items []any
	head  int
}

func (q *queue) push(msg any) { q.items = append(q.items, msg) }

func (q *queue) pop() any {
	if q.head == len(q.items) {
		return nil
	}
	msg := q.items[q.head]
	q.items[q.head] = nil
	if q.head++; q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return msg
}

// PostUserMessage implements actor.Mailbox. The messages of a batch are posted one by one before
// the batch, as by protoactor's mailbox.
func (m *mailbox) PostUserMessage(msg any) {
	if batch, ok := msg.(actor.MessageBatch); ok {
		for _, b := range batch.GetMessages() {
			m.PostUserMessage(b)
		}
	}
	if env, ok := msg.(*actor.MessageEnvelope); ok {
		if batch, ok := env.Message.(actor.MessageBatch); ok {
			for _, b := range batch.GetMessages() {
				m.PostUserMessage(b)
			}
		}
	}
	m.mu.Lock()
	m.user.push(msg)
	m.mu.Unlock()
	m.userN.Add(1)
	m.schedule()
}

// PostSystemMessage implements actor.Mailbox.
func (m *mailbox) PostSystemMessage(msg any) {
	m.mu.Lock()
	m.sys.push(msg)
	m.mu.Unlock()
	m.sysN.Add(1)
	m.schedule()
}

// RegisterHandlers implements actor.Mailbox.
func (m *mailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker, m.dispatcher = invoker, dispatcher
}

// Start implements actor.Mailbox.
func (m *mailbox) Start() {}

// UserMessageCount implements actor.Mailbox.
func (m *mailbox) UserMessageCount() int { return int(m.userN.Load()) }

func (m *mailbox) schedule() {
	if m.scheduled.CompareAndSwap(false, true) {
		m.dispatcher.Schedule(m.process)
	}
}

// processMessages processes what is queued, then again what was posted while it let go of the
// mailbox, unless another goroutine has taken it meanwhile.
func (m *mailbox) processMessages() {
	for {
		m.run()
		m.scheduled.Store(false)
		if m.sysN.Load() == 0 && (m.suspended.Load() || m.userN.Load() == 0) {
			return
		}
		if !m.scheduled.CompareAndSwap(false, true) {
			return
		}
	}
}

func (m *mailbox) run() {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	for i, throughput := 0, m.dispatcher.Throughput(); ; i++ {
		if i > throughput {
			i = 0
			runtime.Gosched()
		}
		if msg = m.take(&m.sys, &m.sysN); msg != nil {
			switch msg.(type) {
			case *actor.SuspendMailbox:
				m.suspended.Store(true)
			case *actor.ResumeMailbox:
				m.suspended.Store(false)
			default:
				m.invoker.InvokeSystemMessage(msg)
			}
			continue
		}
		if m.suspended.Load() {
			return
		}
		if msg = m.take(&m.user, &m.userN); msg == nil {
			return
		}
		m.invoker.InvokeUserMessage(msg)
	}
}

// take pops the next message of q, whose count is n, or returns nil.
func (m *mailbox) take(q *queue, n *atomic.Int32) any {
	m.mu.Lock()
	msg := q.pop()
	m.mu.Unlock()
	if msg != nil {
		n.Add(-1)
	}
	return msg
}
