package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/graph"
)

// ScheduleRow is a row of the schedules table: a schedule as the replica that last recorded or
// fired it defined it, and how far its fire times have been handled.
type ScheduleRow struct {
	Name         string `bun:"name" json:"name"`
	GraphName    string `bun:"graph_name" json:"graph"`
	GraphVersion string `bun:"graph_version" json:"version"`
	Cron         string `bun:"cron" json:"cron"`
	Location     string `bun:"location" json:"location"`
	CatchUp      string `bun:"catch_up" json:"catch_up"`
	// HandledThrough: every fire time up to it has started its execution, or was skipped by the
	// schedule's catch-up rule.
	HandledThrough time.Time `bun:"handled_through" json:"handled_through"`
	// LastFire is the latest fire time that started an execution; nil before the first.
	LastFire *time.Time `bun:"last_fire" json:"last_fire"`
	// NextFire is the first fire time after HandledThrough; nil if the cron fires no more.
	NextFire  *time.Time `bun:"next_fire" json:"next_fire"`
	UpdatedAt time.Time  `bun:"updated_at" json:"updated_at"`
}

var scheduleColumns = tableColumns[ScheduleRow]()

// ScheduleDef is a schedule as this replica defines it: what FireSchedule starts and records.
type ScheduleDef struct {
	Name     string
	Graph    *graph.Graph
	Cron     string
	Location string
	CatchUp  string
	// Values are the inputs of each execution it starts, encoded and checked.
	Values map[string]json.RawMessage
}

// ScheduleFiring is what a schedule's rule decided, from its row and the time: the fire times to
// start an execution for, each with its key, and how far the fire times are handled after them.
type ScheduleFiring struct {
	Fires          []time.Time
	Keys           []string
	HandledThrough time.Time
	NextFire       *time.Time
}

// Fired is the outcome of FireSchedule.
type Fired struct {
	// Locked: another replica held the schedule's row, and fires it; nothing was done here.
	Locked bool
	// Started are the executions started, one a fire time, in the order of the fire times; an
	// execution that held the fire time's key already has Existing set.
	Started []*Execution
	// Fires are the fire times of Started.
	Fires []time.Time
	// Row is the schedule's row as this call left it (zero if Locked).
	Row ScheduleRow
}

// ScheduleTimes reads the handled_through of the schedules named, and the time by the store's
// clock (the database's now(), or the stubbed one): from them and its own cron, a replica tells
// which schedules are due, without a lock. A schedule with no row is missing from the map.
func (s *Store) ScheduleTimes(ctx context.Context, names []string) (map[string]time.Time, time.Time, error) {
	var rows []struct {
		Name           *string    `bun:"name"`
		HandledThrough *time.Time `bun:"handled_through"`
		Now            time.Time  `bun:"now"`
	}
	// The time comes in a row of its own, so that it comes with no schedule row at all.
	err := s.db.NewRaw(s.q(`SELECT NULL AS name, NULL::timestamptz AS handled_through, coalesce(?::timestamptz, now()) AS now
		UNION ALL SELECT name, handled_through, NULL FROM {s}.schedules WHERE name = ANY(?::text[])`),
		s.clock.NowOrNil(), pgdialect.Array(names)).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return nil, time.Time{}, fmt.Errorf("reading the schedules: %w", err)
	}
	out := make(map[string]time.Time, len(rows))
	var now time.Time
	for _, r := range rows {
		if r.Name == nil {
			now = r.Now
			continue
		}
		out[*r.Name] = *r.HandledThrough
	}
	return out, now, nil
}

// FireSchedule fires def in one transaction: it inserts the schedule's row if it is missing,
// handled through now (a schedule seen for the first time fires nothing of the past), locks it,
// unless another replica holds it (then it does nothing, and reports Locked), asks decide what
// the row and the time make due, starts an execution of def.Graph with def.Values for each fire
// time decided, keyed as decided, then records the definition, the fire times handled and the
// next one. The lock and the row's update in the transaction that starts the executions make each
// fire time start one execution, whichever replicas fire the schedule, and however often; a key
// already held starts nothing (Existing). The executions' work runs once the transaction
// commits, announced by its NOTIFY.
func (s *Store) FireSchedule(ctx context.Context, def ScheduleDef, decide func(row ScheduleRow, now time.Time) (ScheduleFiring, error)) (Fired, error) {
	var out Fired
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		out = Fired{}
		if err := s.boundLocks(ctx, tx); err != nil {
			return err
		}
		now, err := s.now(ctx, tx)
		if err != nil {
			return fmt.Errorf("reading the time: %w", err)
		}
		// A row that another replica inserts meanwhile makes this INSERT wait for its transaction,
		// a short one; the lock timeout bounds the wait.
		if _, err := tx.NewRaw(s.q(`INSERT INTO {s}.schedules (name, graph_name, graph_version, cron, location, catch_up,
				handled_through, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING`),
			def.Name, def.Graph.Name(), def.Graph.Version(), def.Cron, def.Location, def.CatchUp, now, now).Exec(ctx); err != nil {
			return fmt.Errorf("recording schedule %q: %w", def.Name, err)
		}
		var rows []ScheduleRow
		err = tx.NewRaw(s.q(`SELECT `+cols("", scheduleColumns)+` FROM {s}.schedules WHERE name = ? FOR UPDATE SKIP LOCKED`),
			def.Name).Scan(ctx, &rows)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("locking schedule %q: %w", def.Name, err)
		}
		if len(rows) == 0 {
			out.Locked = true
			return nil
		}
		firing, err := decide(rows[0], now)
		if err != nil {
			return err
		}
		in := s.inCaller(Caller{SQL: tx.Tx})
		for i, fire := range firing.Fires {
			// One start a fire time: a singleton graph's fires share its one key, which one
			// statement could not insert twice.
			execs, err := s.createExecutions(ctx, in, def.Graph, []map[string]json.RawMessage{def.Values}, []string{firing.Keys[i]}, nil, nil)
			if err != nil {
				return fmt.Errorf("starting the execution of schedule %q for %s: %w", def.Name, fire.Format(time.RFC3339), err)
			}
			out.Started = append(out.Started, execs[0])
			out.Fires = append(out.Fires, fire)
		}
		err = tx.NewRaw(s.q(`UPDATE {s}.schedules SET graph_name = ?, graph_version = ?, cron = ?, location = ?, catch_up = ?,
				handled_through = ?, last_fire = coalesce(?, last_fire), next_fire = ?, updated_at = ?
			WHERE name = ? RETURNING `+cols("", scheduleColumns)),
			def.Graph.Name(), def.Graph.Version(), def.Cron, def.Location, def.CatchUp,
			firing.HandledThrough, lastOf(firing.Fires), firing.NextFire, now, def.Name).Scan(ctx, &rows)
		if err != nil {
			return fmt.Errorf("recording the fire times of schedule %q: %w", def.Name, err)
		}
		out.Row = rows[0]
		return nil
	})
	if err != nil {
		return Fired{}, err
	}
	return out, nil
}

// lastOf is the last of times, nil if there is none.
func lastOf(times []time.Time) *time.Time {
	if len(times) == 0 {
		return nil
	}
	return &times[len(times)-1]
}

// Schedules lists the schedules' rows, by name.
func (s *Store) Schedules(ctx context.Context) ([]ScheduleRow, error) {
	var out []ScheduleRow
	err := s.db.NewRaw(s.q(`SELECT `+cols("", scheduleColumns)+` FROM {s}.schedules ORDER BY name`)).Scan(ctx, &out)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("listing the schedules: %w", err)
	}
	return out, nil
}
