package scheduler

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// parser reads the standard five fields (minute, hour, day of month, month, day of week) and the
// descriptors (@daily, @every 1h, ...), as cron.ParseStandard does.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse reads a cron expression of five fields, or a descriptor such as @hourly or @every 90m.
// It refuses a CRON_TZ= or TZ= prefix: the schedule's Location says where its times are read.
func Parse(expr string) (cron.Schedule, error) {
	trimmed := strings.TrimSpace(expr)
	switch {
	case trimmed == "":
		return nil, errors.New("the cron expression is empty: give five fields, such as \"0 9 * * MON\"")
	case strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ="):
		return nil, fmt.Errorf("cron %q names a time zone: drop the prefix, and set Location instead", expr)
	}
	spec, err := parser.Parse(trimmed)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %w (five fields: minute hour day-of-month month day-of-week)", expr, err)
	}
	return spec, nil
}

// Next returns the first fire time of spec after the instant after, with the fields of spec read
// as wall-clock times in loc; the zero time if spec fires no more (within the five years that the
// cron library looks ahead).
//
// Daylight saving time: a wall-clock time that loc skips (02:30 when the clocks go from 02:00 to
// 03:00) fires once, at the instant of the jump (03:00); fire times that land on one instant fire
// once. A wall-clock time that loc repeats (01:30 when the clocks go back from 02:00 to 01:00)
// fires once, at its first occurrence: so a cron of every few minutes is quiet through the
// repeated hour. An @every descriptor counts real time, and is not read in loc.
func Next(spec cron.Schedule, loc *time.Location, after time.Time) time.Time {
	if _, ok := spec.(cron.ConstantDelaySchedule); ok {
		return spec.Next(after)
	}
	w := wall(after, loc)
	// A wall-clock time whose instants all lie before after (the first occurrence of a repeated
	// time when after is in the second) is passed over. The bound is generous: two suffice.
	for range 8 {
		// The cron library works in UTC here, where every wall-clock time occurs once.
		next := spec.Next(w)
		if next.IsZero() {
			return time.Time{}
		}
		for _, t := range instants(next, loc) {
			if t.After(after) {
				return t
			}
		}
		w = next
	}
	return time.Time{}
}

// wall is the wall-clock time of t in loc, written as a time in UTC.
func wall(t time.Time, loc *time.Location) time.Time {
	u := t.In(loc)
	return time.Date(u.Year(), u.Month(), u.Day(), u.Hour(), u.Minute(), u.Second(), u.Nanosecond(), time.UTC)
}

// instants are the instants whose wall-clock time in loc is w (written in UTC), in order: one;
// two in a repeated hour; and for a time that loc skips, the instant of the jump, the first whose
// wall-clock time is past w.
func instants(w time.Time, loc *time.Location) []time.Time {
	// The offsets in effect around w. Time zones change offset at most once a day.
	guess := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	_, before := guess.Add(-12 * time.Hour).Zone()
	_, after := guess.Add(12 * time.Hour).Zone()
	var out []time.Time
	for _, off := range []int{before, after} {
		t := w.Add(-time.Duration(off) * time.Second)
		if wall(t, loc).Equal(w) && (len(out) == 0 || !out[0].Equal(t)) {
			out = append(out, t)
		}
	}
	if len(out) > 0 {
		sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
		return out
	}
	// Skipped: the jump lies between w read with the larger offset and w read with the smaller.
	lo, hi := w.Add(-time.Duration(max(before, after))*time.Second), w.Add(-time.Duration(min(before, after))*time.Second)
	n := sort.Search(int(hi.Sub(lo)/time.Second)+1, func(i int) bool {
		return !wall(lo.Add(time.Duration(i)*time.Second), loc).Before(w)
	})
	return []time.Time{lo.Add(time.Duration(n) * time.Second)}
}
