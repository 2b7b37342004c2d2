package actors

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
)

// invoker records what a mailbox hands it, and fails if two goroutines process at once.
type invoker struct {
	t         *testing.T
	mu        sync.Mutex
	got       []any
	escalated []any
	busy      atomic.Bool
	panicOn   any
	// want, if set, is the number of messages at which done is closed.
	want int
	done chan struct{}
}

func (v *invoker) invoke(msg any) {
	require.True(v.t, v.busy.CompareAndSwap(false, true), "two goroutines process the mailbox at once")
	defer v.busy.Store(false)
	v.mu.Lock()
	v.got = append(v.got, msg)
	if len(v.got) == v.want {
		close(v.done)
	}
	v.mu.Unlock()
	if msg == v.panicOn && msg != nil {
		panic("boom")
	}
}

func (v *invoker) InvokeSystemMessage(msg any) { v.invoke(msg) }
func (v *invoker) InvokeUserMessage(msg any)   { v.invoke(msg) }
func (v *invoker) EscalateFailure(_ any, msg any) {
	v.busy.Store(false) // the panic left invoke without its defer's turn, as in an actor
	v.escalated = append(v.escalated, msg)
}

func (v *invoker) messages() []any {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]any(nil), v.got...)
}

// held is a dispatcher that keeps what it is given to schedule, for the test to run.
type held struct{ fns []func() }

func (h *held) Schedule(fn func()) { h.fns = append(h.fns, fn) }
func (h *held) Throughput() int    { return 2 }
func (h *held) runAll() {
	for len(h.fns) > 0 {
		fn := h.fns[0]
		h.fns = h.fns[1:]
		fn()
	}
}

type sys string

func TestMailboxProcessesSystemMessagesFirstAndUserMessagesInOrder(t *testing.T) {
	t.Parallel()
	v, d := &invoker{t: t}, &held{}
	m := newMailbox()
	m.RegisterHandlers(v, d)
	for i := range 6 {
		m.PostUserMessage(i)
	}
	m.PostSystemMessage(sys("a"))
	require.Len(t, d.fns, 1, "scheduled once while it waits to run")
	require.Equal(t, 6, m.UserMessageCount())
	d.runAll()
	require.Equal(t, []any{sys("a"), 0, 1, 2, 3, 4, 5}, v.messages(), "past the inline arrays, in order")
	require.Zero(t, m.UserMessageCount())

	m.PostUserMessage(6)
	require.Len(t, d.fns, 1, "scheduled again once idle")
	d.runAll()
	require.Equal(t, 6, v.messages()[7])
}

func TestMailboxHoldsUserMessagesWhileSuspended(t *testing.T) {
	t.Parallel()
	v, d := &invoker{t: t}, &held{}
	m := newMailbox()
	m.RegisterHandlers(v, d)
	m.PostSystemMessage(&actor.SuspendMailbox{})
	m.PostUserMessage(1)
	m.PostSystemMessage(sys("a"))
	d.runAll()
	require.Equal(t, []any{sys("a")}, v.messages(), "system messages go on, user messages wait")
	m.PostSystemMessage(&actor.ResumeMailbox{})
	d.runAll()
	require.Equal(t, []any{sys("a"), 1}, v.messages())
}

func TestMailboxEscalatesAPanicAndGoesOn(t *testing.T) {
	t.Parallel()
	v, d := &invoker{t: t, panicOn: 2}, &held{}
	m := newMailbox()
	m.RegisterHandlers(v, d)
	for i := range 4 {
		m.PostUserMessage(i)
	}
	d.runAll()
	require.Equal(t, []any{2}, v.escalated, "the message that panicked")
	require.Equal(t, []any{0, 1, 2, 3}, v.messages(), "the messages after it are processed")
}

// Messages posted from many goroutines are each processed once, by one goroutine at a time.
func TestMailboxUnderConcurrentPosts(t *testing.T) {
	t.Parallel()
	w := newWorkers(4)
	defer w.close()
	const posters, each = 8, 2000
	v := &invoker{t: t, want: posters * each * 11 / 10, done: make(chan struct{})}
	m := newMailbox()
	m.RegisterHandlers(v, w)
	var wg sync.WaitGroup
	for p := range posters {
		wg.Go(func() {
			for i := range each {
				if i%10 == 0 {
					m.PostSystemMessage(sys("s"))
				}
				m.PostUserMessage(p*each + i)
			}
		})
	}
	wg.Wait()
	<-v.done
	seen := map[int]bool{}
	for _, msg := range v.messages() {
		if n, ok := msg.(int); ok {
			require.False(t, seen[n], "message %d twice", n)
			seen[n] = true
		}
	}
	require.Len(t, seen, posters*each)
}
