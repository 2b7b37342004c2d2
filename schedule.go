package journey

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/persistence"
	"github.com/journey-go/journey/scheduler"
)

// Schedule starts an execution of Graph at each fire time of Cron, read in Location: one
// execution per fire time across all replicas, whichever replicas are up. Each replica that lists
// the schedule in Config.Schedules fires it; the first to lock the schedule's row at a fire time
// starts its execution, in the transaction that records the fire time as handled, and the others
// find nothing left to do. A replica that does not list it, or does not serve its graph, leaves
// it alone. The execution holds the key "schedule:NAME:FIRE_TIME" (the fire time in UTC,
// RFC 3339; see WithKey), which FindByKey reads; an execution of a graph.Singleton graph holds
// that graph's one key instead, and a fire time while it is unarchived starts nothing.
//
// A schedule seen for the first time fires nothing of the past: its first fire time is the first
// after the replica that first recorded it started. After a time when no replica that lists it
// was up, CatchUp says what the missed fire times start.
//
// Daylight saving time: Cron's fields are wall-clock times in Location. A wall-clock time that
// Location skips (02:30 when the clocks go from 02:00 to 03:00) fires once, at the instant of the
// jump (03:00 new time); fire times that land on one instant fire once. A wall-clock time that
// Location repeats (01:30 when the clocks go back from 02:00 to 01:00) fires once, at its first
// occurrence, so a cron of every few minutes is quiet through the repeated hour: give such a
// schedule Location time.UTC, or an @every descriptor, which counts real time.
//
// `journey schedules` and the dashboard list each schedule's last and next fire times.
type Schedule struct {
	// Name names the schedule across replicas and releases: at most 200 bytes of UTF-8 with no
	// control characters, unique in Config.Schedules. Replicas that list one name fire it as one
	// schedule. Renaming a schedule makes a new one, which fires nothing of the past.
	Name string
	// Graph is the graph each fire time starts, one of Config.Graphs.
	Graph *graph.Graph
	// Cron says when it fires: five fields (minute, hour, day of month, month, day of week), as
	// in "0 9 * * MON", or a descriptor: @hourly, @daily, @weekly, @monthly, @yearly, or
	// @every with a duration ("@every 90m", counted from the fire time before). No seconds, and no
	// CRON_TZ= prefix: Location says where the times are read. Parsed by
	// github.com/robfig/cron/v3.
	Cron string
	// Location is where Cron's wall-clock times are read. Default time.UTC. Give every replica the
	// same, loaded with time.LoadLocation: the time zone database of each replica's system (or
	// the embedded time/tzdata) decides the offsets.
	Location *time.Location
	// Values are the inputs each execution starts with (see WithValues): each must name an input
	// node of Graph, with a value that can be stored. Default none.
	Values map[string]any
	// CatchUp says what the fire times missed while no replica fired the schedule start.
	// Default CatchUpNone.
	CatchUp CatchUp
}

// CatchUp says what a schedule's fire times missed while no replica fired it (all were down, say)
// start, once a replica is up again.
type CatchUp int

const (
	// CatchUpNone starts none of the fire times missed: a fire time found more than a minute late
	// (scheduler.DefaultGrace) is skipped. The default, as cron does. A replica that is up fires
	// on time (it sleeps until the next fire time), so the minute only covers a slow pass, or a
	// restart across the fire time.
	CatchUpNone CatchUp = iota
	// CatchUpOnce starts one execution, for the latest fire time missed, and skips the others: a
	// report that only needs to run again.
	CatchUpOnce
	// CatchUpEach starts one execution for each fire time missed, in order: up to 100 a pass, and
	// the rest at the next passes, which follow at once.
	CatchUpEach
)

// String returns "none", "once" or "each", as journey schedules shows it.
func (c CatchUp) String() string {
	switch c {
	case CatchUpNone:
		return scheduler.CatchUpNone
	case CatchUpOnce:
		return scheduler.CatchUpOnce
	case CatchUpEach:
		return scheduler.CatchUpEach
	}
	return fmt.Sprintf("CatchUp(%d)", int(c))
}

// maxScheduleNameBytes caps Schedule.Name, which each execution's key holds (at most 1 KiB).
const maxScheduleNameBytes = 200

// schedules checks c.Schedules and returns them as the scheduler fires them, or every problem,
// each naming the schedule it concerns. c has its defaults.
func (c Config) schedules() ([]scheduler.Schedule, []error) {
	graphs := map[string]*graph.Graph{}
	for _, g := range c.Graphs {
		if g != nil {
			graphs[persistence.GraphKey(g.Name(), g.Version())] = g
		}
	}
	var out []scheduler.Schedule
	var errs []error
	seen := map[string]bool{}
	for i, s := range c.Schedules {
		field := fmt.Sprintf("config: Schedules[%d]", i)
		if s.Name != "" {
			field += fmt.Sprintf(" (%q)", s.Name)
		}
		bad := false
		// problem records a problem of the schedule, its field first.
		problem := func(format string, args ...any) {
			bad = true
			errs = append(errs, fmt.Errorf("%s: "+format, append([]any{field}, args...)...))
		}
		switch err := persistence.CheckText("name", s.Name); {
		case s.Name == "":
			problem("Name is empty: name the schedule, such as \"nightly-report\"")
		case err != nil:
			problem("Name: %w", err)
		case len(s.Name) > maxScheduleNameBytes:
			problem("Name is %d bytes long: keep it to %d", len(s.Name), maxScheduleNameBytes)
		case seen[s.Name]:
			problem("Name is used by another schedule: give each its own")
		}
		seen[s.Name] = true
		var g *graph.Graph
		if s.Graph == nil {
			problem("Graph is nil: give the graph to start")
		} else if g = graphs[persistence.GraphKey(s.Graph.Name(), s.Graph.Version())]; g == nil {
			problem("Graph %q version %q is not in Config.Graphs: register it there too", s.Graph.Name(), s.Graph.Version())
		}
		loc := s.Location
		if loc == nil {
			loc = time.UTC
		}
		spec, err := scheduler.Parse(s.Cron)
		switch {
		case err != nil:
			problem("Cron: %w", err)
		case scheduler.Next(spec, loc, time.Now()).IsZero():
			problem("Cron %q never fires in the next five years: check the day and the month", s.Cron)
		}
		if s.CatchUp < CatchUpNone || s.CatchUp > CatchUpEach {
			problem("CatchUp is %v: use CatchUpNone, CatchUpOnce or CatchUpEach", s.CatchUp)
		}
		values := make(map[string]json.RawMessage, len(s.Values))
		for _, node := range slices.Sorted(maps.Keys(s.Values)) {
			if g != nil {
				if err := persistence.CheckInput(g, node); err != nil {
					problem("Values: %w", err)
					continue
				}
			}
			raw, err := json.Marshal(s.Values[node])
			if err == nil {
				err = persistence.CheckValue(raw, c.MaxValueBytes)
			}
			if err != nil {
				problem("Values: %w: node %q: %w", ErrInvalidValue, node, err)
				continue
			}
			values[node] = raw
		}
		if bad {
			continue
		}
		out = append(out, scheduler.Schedule{
			ScheduleDef: persistence.ScheduleDef{Name: s.Name, Graph: g, Cron: s.Cron, Location: loc.String(),
				CatchUp: s.CatchUp.String(), Values: values},
			Spec: spec, Loc: loc,
		})
	}
	return out, errs
}
