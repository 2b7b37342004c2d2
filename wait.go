package journey

import (
	"math"
	"sync"
	"sync/atomic"
)

// waiters wakes the Get calls waiting on an execution when the listener hears of a change.
type waiters struct {
	mu sync.Mutex
	m  map[string]map[*waiter]struct{}
}

// waiter is one waiting Get. Its channel receives at most one pending wakeup.
type waiter struct {
	ch chan struct{}
	// seen is the execution's revision at the waiter's last look; -1 before it. A change at a
	// revision no newer was in what the look read: it does not wake the waiter.
	seen atomic.Int64
	// woke is the newest revision that signalled ch (math.MaxInt64 for a change of unknown
	// revision). A change heard while the look ran may be one the look read: settle drops its
	// wakeup then.
	woke atomic.Int64
}

// settle records the revision rev that a look read, and drops a pending wakeup for a change no
// newer: at 400 executions/s, the Set's own notification, heard while the Get's first look ran,
// made one Get in two look again for nothing.
func (wt *waiter) settle(rev int64) {
	wt.seen.Store(rev)
	select {
	case <-wt.ch:
		if wt.woke.Load() > rev {
			signal(wt.ch) // a newer change: keep its wakeup
		}
	default:
	}
}

func newWaiters() *waiters { return &waiters{m: map[string]map[*waiter]struct{}{}} }

// add registers a waiter on execution id.
func (w *waiters) add(id string) (wt *waiter, remove func()) {
	wt = &waiter{ch: make(chan struct{}, 1)}
	wt.seen.Store(-1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m[id] == nil {
		w.m[id] = map[*waiter]struct{}{}
	}
	w.m[id][wt] = struct{}{}
	return wt, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.m[id], wt)
		if len(w.m[id]) == 0 {
			delete(w.m, id)
		}
	}
}

// wake wakes the waiters on execution id that have not seen revision rev; rev < 0 (unknown)
// wakes them all.
func (w *waiters) wake(id string, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rev < 0 {
		rev = math.MaxInt64
	}
	for wt := range w.m[id] {
		if rev > wt.seen.Load() {
			if wt.woke.Load() < rev { // written under w.mu only
				wt.woke.Store(rev)
			}
			signal(wt.ch)
		}
	}
}

func (w *waiters) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ws := range w.m {
		for wt := range ws {
			wt.woke.Store(math.MaxInt64)
			signal(wt.ch)
		}
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
