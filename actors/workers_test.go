package actors

import (
	"testing"
	"time"
)

// A mailbox that blocks its worker holds up no other: the next one gets a goroutine of its own.
func TestWorkersNeverQueueBehindABlockedMailbox(t *testing.T) {
	w := newWorkers(1)
	defer w.close()
	release, ran := make(chan struct{}), make(chan struct{})
	defer close(release)
	w.Schedule(func() { <-release })
	w.Schedule(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the second mailbox waited for the first, which blocks")
	}
}

// After close, mailboxes still run, each on a goroutine of its own.
func TestWorkersRunMailboxesAfterClose(t *testing.T) {
	w := newWorkers(2)
	w.close()
	ran := make(chan struct{})
	w.Schedule(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("a mailbox scheduled after close never ran")
	}
}
