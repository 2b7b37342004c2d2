package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"time"

	"github.com/uptrace/bun/dialect/pgdialect"

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

// tickDue reports whether a tick node has a value whose time has come.
func (st *execState) tickDue(name string) bool {
	t, ok := tickTime(st.values[name])
	return ok && !t.After(st.now)
}

// dueView is the values as gates see them to decide whether a node may run: a tick is provided
// only once it is due.
func (st *execState) dueView() graph.Values {
	due := make(graph.Values, len(st.values))
	for name, v := range st.values {
		if n, _ := st.g.Node(name); isTick(n) && !st.tickDue(name) {
			continue
		}
		due[name] = v
	}
	return due
}

// dueOf is vals, values of the execution with the same ticks, as dueView sees them: vals itself
// if every tick in it is due.
func dueOf(st *execState, vals graph.Values) graph.Values {
	var due graph.Values
	for name := range vals {
		if n, _ := st.g.Node(name); isTick(n) && !st.tickDue(name) {
			if due == nil {
				due = maps.Clone(vals)
			}
			delete(due, name)
		}
	}
	if due == nil {
		return vals
	}
	return due
}

// nextWake is the earliest time a tick of the execution comes due, nil if none is waiting.
func (st *execState) nextWake() *time.Time {
	var next *time.Time
	for _, n := range st.g.Nodes() {
		if !isTick(n) {
			continue
		}
		if t, ok := tickTime(st.values[n.Name()]); ok && t.After(st.now) && (next == nil || t.Before(*next)) {
			next = &t
		}
	}
	return next
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

// recordHistory adds an entry to a historian, whose gate holds, for each tracked node whose
// revision went up, newest first, keeping at most MaxEntries. It reports whether the historian
// changed.
func (s *Store) recordHistory(ctx context.Context, tx *txn, st *execState, n graph.Node) (bool, error) {
	var entries []HistoryEntry
	seen := historianSeen{Seen: map[string]int64{}}
	if v, ok := st.values[n.Name()]; ok {
		if err := json.Unmarshal(v.Raw, &entries); err != nil {
			return false, fmt.Errorf("reading historian %q: %w", n.Name(), err)
		}
		if len(v.Metadata) > 0 {
			if err := json.Unmarshal(v.Metadata, &seen); err != nil {
				return false, fmt.Errorf("reading historian %q: %w", n.Name(), err)
			}
		}
	}
	var added []HistoryEntry
	for _, up := range n.Upstream() {
		v, ok := st.values[up]
		if !ok || v.Revision <= seen.Seen[up] {
			continue
		}
		seen.Seen[up] = v.Revision
		added = append(added, HistoryEntry{Node: up, Value: v.Raw, Metadata: v.Metadata, Revision: v.Revision, At: v.SetAt})
	}
	if len(added) == 0 {
		return false, nil
	}
	sort.SliceStable(added, func(i, j int) bool { return added[i].Revision > added[j].Revision })
	entries = append(added, entries...)
	if max := n.Settings().MaxEntries; len(entries) > max {
		entries = entries[:max]
	}
	raw, err := json.Marshal(entries)
	if err != nil {
		return false, fmt.Errorf("writing historian %q: %w", n.Name(), err)
	}
	meta, err := json.Marshal(seen)
	if err != nil {
		return false, fmt.Errorf("writing historian %q: %w", n.Name(), err)
	}
	st.revision++
	return s.upsertValue(ctx, tx, st, n.Name(), raw, meta, st.revision)
}

// archiveByNode archives the execution, as an archive node whose gate holds does. The node's
// value is the time of archiving, in Unix milliseconds.
func (s *Store) archiveByNode(ctx context.Context, tx *txn, st *execState, name string) error {
	st.revision++
	if _, err := s.upsertValue(ctx, tx, st, name, json.RawMessage(strconv.FormatInt(st.now.UnixMilli(), 10)), nil, st.revision); err != nil {
		return err
	}
	return s.setArchived(ctx, tx, st, true)
}

// ReasonArchived is the error of an attempt canceled because its execution was archived.
// Unarchive revives the newest such attempt of each node, with its attempt number.
const ReasonArchived = "canceled: execution archived"

// setArchived archives or unarchives the execution. Archiving cancels its PENDING and AVAILABLE
// attempts, so that no gating slot stays held by work that will never be claimed; its RUNNING
// attempts finish, or are abandoned, as usual. Archiving frees the execution's key. Unarchiving
// revives what archiving canceled; it fails with ErrKeyHeld if another unarchived execution of the
// graph holds the key by then, and the transaction, in which the statement failed, changes
// nothing.
func (s *Store) setArchived(ctx context.Context, tx *txn, st *execState, archived bool) error {
	var at *time.Time
	if archived {
		at = &st.now
	}
	_, err := tx.NewRaw(s.q("UPDATE {s}.executions SET archived_at = ? WHERE id = ?"), at, st.exec.ID).Exec(ctx)
	if err != nil {
		if held := keyHeld(err, &st.exec); held != nil {
			return held
		}
		return fmt.Errorf("archiving %s: %w", st.exec.ID, err)
	}
	st.exec.ArchivedAt = at
	if archived {
		return s.cancelArchived(ctx, tx, st)
	}
	return s.reviveArchived(ctx, tx, st)
}

// cancelArchived cancels the execution's attempts that wait to run. A row that a claim holds is
// skipped: it is RUNNING once the claim commits.
func (s *Store) cancelArchived(ctx context.Context, tx *txn, st *execState) error {
	var canceled []*Computation
	err := tx.NewRaw(s.q(`UPDATE {s}.computations SET state = 'CANCELED', error = ?, finished_at = ?
		WHERE id IN (SELECT id FROM {s}.computations
			WHERE execution_id = ? AND state IN ('PENDING', 'AVAILABLE') FOR UPDATE SKIP LOCKED)
		RETURNING `+cols("", computationColumns)), ReasonArchived, st.now, st.exec.ID).Scan(ctx, &canceled)
	if err != nil && !isNoRows(err) {
		return fmt.Errorf("canceling the waiting work of archived execution %s: %w", st.exec.ID, err)
	}
	for _, c := range canceled {
		st.latest[c.Node] = c
		st.promote = st.promote || c.gated() // an AVAILABLE one held a slot
	}
	for _, c := range st.created { // not in the table yet
		if c.active() {
			reason := ReasonArchived
			c.State, c.Error, c.FinishedAt = StateCanceled, &reason, &st.now
		}
	}
	return nil
}

// reviveArchived gives back to the queue the newest attempt of each node that archiving canceled.
func (s *Store) reviveArchived(ctx context.Context, tx *txn, st *execState) error {
	var ids []int64
	for _, c := range st.latest {
		if c.State == StateCanceled && c.Error != nil && *c.Error == ReasonArchived {
			ids = append(ids, c.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	var revived []*Computation
	err := tx.NewRaw(s.q(`UPDATE {s}.computations
		SET state = CASE WHEN run_at > ? OR concurrency_key IS NOT NULL OR max_parallel IS NOT NULL
				THEN 'PENDING' ELSE 'AVAILABLE' END,
			available_at = ?, error = NULL, finished_at = NULL
		WHERE id = ANY(?::bigint[]) RETURNING `+cols("", computationColumns)), st.now, st.now, pgdialect.Array(ids)).Scan(ctx, &revived)
	if err != nil && !isNoRows(err) {
		return fmt.Errorf("reviving the work of %s: %w", st.exec.ID, err)
	}
	for _, c := range revived {
		st.latest[c.Node] = c
		st.work = st.work || c.State == StateAvailable
		st.promote = st.promote || c.gated()
	}
	return nil
}
