package scheduler

import (
	"time"

	"github.com/robfig/cron/v3"

	"github.com/journey-go/journey/persistence"
)

// How a schedule treats the fire times that passed while no replica fired it (Schedule.CatchUp).
const (
	// CatchUpNone starts the fire times that are due now, within the grace, and skips older ones.
	CatchUpNone = "none"
	// CatchUpOnce starts one execution, for the latest fire time missed.
	CatchUpOnce = "once"
	// CatchUpEach starts one execution for each fire time missed, MaxFires a pass at most.
	CatchUpEach = "each"
)

// Schedule is a schedule as the scheduler fires it: its definition, its cron parsed, and its
// location.
type Schedule struct {
	persistence.ScheduleDef
	Spec cron.Schedule
	Loc  *time.Location
}

// Next is the first fire time of the schedule after after, zero if none (see the function Next).
func (sc Schedule) Next(after time.Time) time.Time { return Next(sc.Spec, sc.Loc, after) }

// Key is the key of the execution that a schedule starts for a fire time: one execution of its
// graph holds it, so a fire time starts at most one, even if the schedule's row were lost.
func Key(name string, fire time.Time) string {
	return "schedule:" + name + ":" + fire.UTC().Format(time.RFC3339)
}

// Plan decides, from a schedule's row and the time now, the fire times to start, and how far the
// fire times are handled after them. The fire times due are those after row.HandledThrough, up
// to now. Of them, by the schedule's CatchUp: CatchUpNone starts those no older than grace, and
// skips the others; CatchUpOnce starts the latest; CatchUpEach starts each, oldest first, up to
// maxFires, and leaves the rest due for the next pass. HandledThrough is then the latest fire
// time handled, started or skipped: a fire time, which the next pass reads as a wall-clock time
// (see Next).
func Plan(sc Schedule, row persistence.ScheduleRow, now time.Time, grace time.Duration, maxFires int) persistence.ScheduleFiring {
	after := row.HandledThrough
	out := persistence.ScheduleFiring{HandledThrough: after}
	latest := latestDue(sc, after, now)
	if !latest.IsZero() {
		out.HandledThrough = latest
		switch sc.CatchUp {
		case CatchUpOnce:
			out.Fires = []time.Time{latest}
		case CatchUpEach:
			for t := sc.Next(after); !t.IsZero() && !t.After(now); t = sc.Next(t) {
				out.Fires = append(out.Fires, t)
				if len(out.Fires) == maxFires {
					out.HandledThrough = t
					break
				}
			}
		default: // CatchUpNone
			// A fire time exactly grace old is still due: look from just before it.
			from := after
			if oldest := now.Add(-grace - time.Nanosecond); oldest.After(after) {
				from = oldest
			}
			for t := sc.Next(from); !t.IsZero() && !t.After(now); t = sc.Next(t) {
				out.Fires = append(out.Fires, t)
				if len(out.Fires) == maxFires {
					break // more than maxFires within the grace: an @every of seconds; the rest are skipped
				}
			}
		}
	}
	for _, t := range out.Fires {
		out.Keys = append(out.Keys, Key(sc.Name, t))
	}
	if next := sc.Next(out.HandledThrough); !next.IsZero() {
		out.NextFire = &next
	}
	return out
}

// latestDue is the latest fire time of sc after after and no later than now, zero if none. It
// looks back from now in windows that grow fourfold, so that a long downtime of an every-minute
// cron costs a few hundred steps, not one a minute missed.
func latestDue(sc Schedule, after, now time.Time) time.Time {
	if first := sc.Next(after); first.IsZero() || first.After(now) {
		return time.Time{}
	}
	for window := time.Hour; ; window *= 4 {
		from := now.Add(-window)
		if !from.After(after) {
			from = after
		}
		var latest time.Time
		for t := sc.Next(from); !t.IsZero() && !t.After(now); t = sc.Next(t) {
			latest = t
		}
		if !latest.IsZero() || from.Equal(after) {
			return latest
		}
	}
}
