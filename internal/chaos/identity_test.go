//go:build linux

package chaos

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
)

// One live process at a time holds a ReplicaID. A second process with the id of a live one does
// not start, and nothing runs twice. Once the holder is SIGKILLed, a process with its id starts
// at once, and takes the dead one's work back at once: long before its ReplicaStaleAfter (a
// minute here), which is what a replica with a new id would wait for.
func TestReplicaIDHeldByOneLiveProcess(t *testing.T) {
	cfg := defaults()
	cfg.StaleAfter = 60_000
	c := newCluster(t, pgtest.URL(t), cfg)
	c.quiet = true
	w := c.start(t, "same")
	ids := c.submit(t, 10)
	w.waitFor(t, "work running", func(w *worker) bool { return w.running() >= 5 })

	second := c.launch(t, "same", os.Args[0])
	select {
	case <-second.exited:
	case <-time.After(time.Minute):
		t.Fatal("the second process with the replica id neither started nor exited")
	}
	require.Zero(t, second.count("ready"), "the second process did not start")
	second.mu.Lock()
	logs := strings.Join(second.logs, "\n")
	second.mu.Unlock()
	require.Contains(t, logs, `ReplicaID "same" is held by host `)
	c.waitDone(t, len(ids), time.Minute)
	for _, comp := range c.audit(t, ids) {
		require.NotEqual(t, persistence.StateAbandoned, comp.State, "nothing was taken from the live process")
	}

	more := c.submit(t, 10)
	w.waitFor(t, "work running", func(w *worker) bool { return w.running() >= 5 })
	w.signal(t, syscall.SIGKILL)
	<-w.exited
	killed := time.Now()
	c.start(t, "same")
	took := c.waitDone(t, len(ids)+len(more), time.Minute)
	require.Less(t, time.Since(killed), 30*time.Second, "the work came back long before the minute of ReplicaStaleAfter (took %v)", took)
	abandoned := 0
	for _, comp := range c.audit(t, more) {
		if comp.State == persistence.StateAbandoned {
			abandoned++
			require.Equal(t, persistence.ReasonRestarted("same"), *comp.Error)
		}
	}
	require.Positive(t, abandoned, "the dead process's running work was abandoned, and retried")
}
