package machine

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/journey-go/journey/graph"
)

// A tick's value is the time it comes due, in Unix milliseconds; 0 means it does not fire (for a
// recurring tick: it is paused).

// TickValue encodes the time a tick function returned.
func TickValue(t time.Time) json.RawMessage {
	if t.IsZero() {
		return json.RawMessage("0")
	}
	return json.RawMessage(strconv.FormatInt(t.UnixMilli(), 10))
}

// tickTime decodes a tick's value; ok is false for a tick that does not fire.
func tickTime(v graph.Value) (t time.Time, ok bool) {
	ms := v.Int()
	if ms <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

func isTick(n graph.Node) bool {
	return n.Kind() == graph.KindTickOnce || n.Kind() == graph.KindTickRecurring
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// HistoryEntry is one entry of a historian's value.
type HistoryEntry struct {
	Node     string          `json:"node"`
	Value    json.RawMessage `json:"value"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Revision int64           `json:"revision"`
	At       time.Time       `json:"at"`
}

// historianSeen is kept in a historian value's metadata: the revision of each tracked node that
// it has recorded, so that entries dropped by MaxEntries are never recorded again.
type historianSeen struct {
	Seen map[string]int64 `json:"seen"`
}

// ReasonArchived is the error of an attempt canceled because its execution was archived.
// Unarchive revives the newest such attempt of each node, with its attempt number.
const ReasonArchived = "canceled: execution archived"
