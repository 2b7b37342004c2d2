package journey

import "sync"

// waiters wakes the Get calls waiting on an execution when the listener hears of a change.
type waiters struct {
	mu sync.Mutex
	m  map[string]map[chan struct{}]struct{}
}

func newWaiters() *waiters { return &waiters{m: map[string]map[chan struct{}]struct{}{}} }

// add registers a waiter on execution id. The channel receives at most one pending wakeup.
func (w *waiters) add(id string) (ch chan struct{}, remove func()) {
	ch = make(chan struct{}, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m[id] == nil {
		w.m[id] = map[chan struct{}]struct{}{}
	}
	w.m[id][ch] = struct{}{}
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.m[id], ch)
		if len(w.m[id]) == 0 {
			delete(w.m, id)
		}
	}
}

func (w *waiters) wake(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.m[id] {
		signal(ch)
	}
}

func (w *waiters) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, chans := range w.m {
		for ch := range chans {
			signal(ch)
		}
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
