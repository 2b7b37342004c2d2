package journey

import (
	"bytes"
	"math"
	"sync"
	"sync/atomic"

	"github.com/journey-go/journey/graph"
)

// waiters wakes the Get calls waiting on an execution when the listener hears of a change, or
// when a write of this replica commits one: that write hands the waiters their node's value, so
// that they need not read it back. It is the store's persistence.Handoff.
type waiters struct {
	mu sync.Mutex
	m  map[string]map[*waiter]struct{}
	// committing are the changes that writes of this replica are committing, to executions with
	// waiters: their NOTIFY wakes no one, as the writer hands the value over when it returns, or
	// wakes them to look again if its COMMIT failed.
	committing map[change]struct{}
}

// change is a revision of an execution.
type change struct {
	id  string
	rev int64
}

// waiter is one waiting Get. Its channel receives at most one pending wakeup.
type waiter struct {
	ch chan struct{}
	// node is the node the Get waits for, and newer the revision its value must be newer than.
	node  string
	newer int64
	// handed is the node's value as the newest change that woke the waiter committed it, if a
	// write of this replica handed it over; nil if the Get must read it.
	handed atomic.Pointer[graph.Value]
	// seen is the execution's revision at the waiter's last look; -1 before it. A change at a
	// revision no newer was in what the look read: it does not wake the waiter.
	seen atomic.Int64
	// woke is the newest revision that signalled ch (math.MaxInt64 for a change of unknown
	// revision). A change heard while the look ran may be one the look read: settle drops its
	// wakeup then.
	woke atomic.Int64
}

// changed signals wt for a change at revision rev (math.MaxInt64: unknown) that it has not seen,
// which committed v as wt's node's value if handed (nil: unknown). It runs under the waiters' mu.
//
// Only the newest change decides what the Get has in hand: v, if it came with the change and is
// newer than the Get asks, and else nothing, and the Get reads. A change heard while the look ran
// is settled once the look has read: see settle.
func (wt *waiter) changed(rev int64, v *graph.Value) {
	seen := wt.seen.Load()
	if rev <= seen {
		return
	}
	if rev > wt.woke.Load() {
		wt.woke.Store(rev)
		wt.handed.Store(nil)
	}
	// A NOTIFY may come before its writer's hand, from a write the waiter was not registered
	// for when it began to commit.
	if rev == wt.woke.Load() && v != nil && v.Revision > wt.newer {
		wt.handed.Store(v)
	}
	signal(wt.ch)
}

// settle records the revision rev that a look read, and drops a pending wakeup for a change no
// newer, with the value it handed: at 400 executions/s, the Set's own notification, heard while
// the Get's first look ran, made one Get in two look again for nothing. A newer change keeps its
// wakeup and its value: it committed after the look's snapshot, so after the Get began.
func (wt *waiter) settle(rev int64) {
	wt.seen.Store(rev)
	select {
	case <-wt.ch:
		if wt.woke.Load() > rev {
			signal(wt.ch) // a newer change: keep its wakeup
		} else {
			wt.handed.Store(nil)
		}
	default:
	}
}

func newWaiters() *waiters {
	return &waiters{m: map[string]map[*waiter]struct{}{}, committing: map[change]struct{}{}}
}

// add registers a waiter on execution id, for a value of node newer than revision newer. The
// Get then looks, whatever this replica last wrote to the execution: a change made elsewhere
// announces itself by a NOTIFY, which may be lost (a writer that dies between its COMMIT and its
// notifications) or never sent (Config.PollOnly), and a Get that trusted what it knew would wait
// for its poll.
func (w *waiters) add(id, node string, newer int64) (wt *waiter, remove func()) {
	wt = &waiter{ch: make(chan struct{}, 1), node: node, newer: newer}
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
// wakes them all. A change that a write of this replica is committing wakes no one: its writer
// will.
func (w *waiters) wake(id string, rev int64) {
	if rev < 0 {
		rev = math.MaxInt64
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.committing[change{id, rev}]; ok {
		return
	}
	for wt := range w.m[id] {
		wt.changed(rev, nil)
	}
}

// Committing implements persistence.Handoff: the waiters on execution id hear of the change at
// revision rev from the write, not from its NOTIFY.
func (w *waiters) Committing(id string, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.m[id]) > 0 {
		w.committing[change{id, rev}] = struct{}{}
	}
}

// Committed implements persistence.Handoff: it wakes the waiters on execution id that have not
// seen revision rev, and hands each the value of its node.
func (w *waiters) Committed(id string, rev int64, values graph.Values) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.committing, change{id, rev})
	for wt := range w.m[id] {
		var handed *graph.Value
		if v, ok := values[wt.node]; ok {
			v.Raw, v.Metadata = bytes.Clone(v.Raw), bytes.Clone(v.Metadata) // each Get its own, as a read gives
			handed = &v
		}
		wt.changed(rev, handed)
	}
}

// Aborted implements persistence.Handoff. The COMMIT failed, or its outcome is unknown: the
// server may have committed the change, and sent its NOTIFY, which wake dropped. So it wakes the
// waiters that have not seen revision rev, to look again; if nothing was committed, their look
// finds nothing new, and they wait on.
func (w *waiters) Aborted(id string, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.committing, change{id, rev})
	for wt := range w.m[id] {
		wt.changed(rev, nil)
	}
}

// wakeAll wakes every waiter: changes may have gone unheard.
func (w *waiters) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ws := range w.m {
		for wt := range ws {
			wt.changed(math.MaxInt64, nil)
		}
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
