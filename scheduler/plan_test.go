package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/persistence"
)

func newYork(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	return loc
}

func schedule(t *testing.T, cron string, loc *time.Location, catchUp string) Schedule {
	t.Helper()
	spec, err := Parse(cron)
	require.NoError(t, err)
	return Schedule{ScheduleDef: persistence.ScheduleDef{Name: "s", Cron: cron, Location: loc.String(), CatchUp: catchUp}, Spec: spec, Loc: loc}
}

// fires lists the fire times of cron in loc after from, up to until.
func fires(t *testing.T, cron string, loc *time.Location, from, until time.Time) []string {
	t.Helper()
	sc := schedule(t, cron, loc, CatchUpEach)
	var out []string
	for f := sc.Next(from); !f.IsZero() && !f.After(until); f = sc.Next(f) {
		out = append(out, f.In(loc).Format("01-02 15:04 MST"))
	}
	return out
}

// In New York the clocks go from 02:00 EST to 03:00 EDT on 9 March 2025, and back from 02:00 EDT
// to 01:00 EST on 2 November 2025.
func TestNextAcrossDaylightSaving(t *testing.T) {
	t.Parallel()
	ny := newYork(t)
	for _, tc := range []struct {
		name, cron  string
		from, until time.Time
		want        []string
	}{
		{"a time in the skipped hour fires at the jump", "30 2 * * *",
			time.Date(2025, 3, 8, 0, 0, 0, 0, ny), time.Date(2025, 3, 11, 0, 0, 0, 0, ny),
			[]string{"03-08 02:30 EST", "03-09 03:00 EDT", "03-10 02:30 EDT"}},
		{"times in the skipped hour fire once, together", "0,30 2 * * *",
			time.Date(2025, 3, 9, 0, 0, 0, 0, ny), time.Date(2025, 3, 9, 12, 0, 0, 0, ny),
			[]string{"03-09 03:00 EDT"}},
		{"a time in the repeated hour fires once", "30 1 * * *",
			time.Date(2025, 11, 1, 0, 0, 0, 0, ny), time.Date(2025, 11, 4, 0, 0, 0, 0, ny),
			[]string{"11-01 01:30 EDT", "11-02 01:30 EDT", "11-03 01:30 EST"}},
		{"the repeated hour is quiet for an every-20-minutes cron", "*/20 * * * *",
			time.Date(2025, 11, 2, 0, 50, 0, 0, ny), time.Date(2025, 11, 2, 2, 30, 0, 0, ny),
			[]string{"11-02 01:00 EDT", "11-02 01:20 EDT", "11-02 01:40 EDT", "11-02 02:00 EST", "11-02 02:20 EST"}},
		{"a day-of-week cron keeps its wall-clock time across the change", "0 9 * * MON",
			time.Date(2025, 3, 1, 0, 0, 0, 0, ny), time.Date(2025, 3, 18, 0, 0, 0, 0, ny),
			[]string{"03-03 09:00 EST", "03-10 09:00 EDT", "03-17 09:00 EDT"}},
		{"@every counts real time", "@every 1h",
			time.Date(2025, 11, 2, 0, 0, 0, 0, ny), time.Date(2025, 11, 2, 2, 0, 0, 0, ny),
			[]string{"11-02 01:00 EDT", "11-02 01:00 EST", "11-02 02:00 EST"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, fires(t, tc.cron, ny, tc.from, tc.until))
		})
	}
}

// An anchor in the second occurrence of the repeated hour fires the next wall-clock time after it.
func TestNextFromTheRepeatedHour(t *testing.T) {
	t.Parallel()
	ny := newYork(t)
	firstOneAM := time.Date(2025, 11, 2, 1, 10, 0, 0, ny) // EDT
	second := firstOneAM.Add(time.Hour)                   // 01:10 EST
	sc := schedule(t, "*/20 * * * *", ny, CatchUpEach)
	require.Equal(t, "01:20 EST", sc.Next(second).In(ny).Format("15:04 MST"))
	require.Equal(t, "01:20 EDT", sc.Next(firstOneAM).In(ny).Format("15:04 MST"))
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string]string{
		"":                              "empty",
		"0 9 * *":                       "five fields",
		"CRON_TZ=Europe/Rome 0 9 * * *": "set Location",
		"61 * * * *":                    "five fields",
	} {
		_, err := Parse(expr)
		require.ErrorContains(t, err, want, expr)
	}
}

func TestPlan(t *testing.T) {
	t.Parallel()
	base := time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)
	hour := func(h int) time.Time { return base.Add(time.Duration(h) * time.Hour) }
	for _, tc := range []struct {
		name    string
		catchUp string
		now     time.Time
		max     int
		fires   []time.Time
		through time.Time
		next    time.Time
	}{
		{"nothing due", CatchUpEach, hour(0).Add(30 * time.Minute), 100, nil, hour(0), hour(1)},
		{"none: due now starts", CatchUpNone, hour(1).Add(10 * time.Second), 100, []time.Time{hour(1)}, hour(1), hour(2)},
		{"none: exactly the grace late starts", CatchUpNone, hour(1).Add(time.Minute), 100, []time.Time{hour(1)}, hour(1), hour(2)},
		{"none: missed ones are skipped", CatchUpNone, hour(5).Add(30 * time.Minute), 100, nil, hour(5), hour(6)},
		{"none: missed ones skipped, the one due now starts", CatchUpNone, hour(5).Add(5 * time.Second), 100, []time.Time{hour(5)}, hour(5), hour(6)},
		{"once: the latest starts", CatchUpOnce, hour(5).Add(30 * time.Minute), 100, []time.Time{hour(5)}, hour(5), hour(6)},
		{"once: after a month, the latest", CatchUpOnce, hour(24 * 31).Add(time.Minute), 100, []time.Time{hour(24 * 31)}, hour(24 * 31), hour(24*31 + 1)},
		{"each: every one", CatchUpEach, hour(3).Add(30 * time.Minute), 100, []time.Time{hour(1), hour(2), hour(3)}, hour(3), hour(4)},
		{"each: capped, the rest stays due", CatchUpEach, hour(5).Add(30 * time.Minute), 2, []time.Time{hour(1), hour(2)}, hour(2), hour(3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sc := schedule(t, "0 * * * *", time.UTC, tc.catchUp)
			got := Plan(sc, persistence.ScheduleRow{HandledThrough: hour(0)}, tc.now, time.Minute, tc.max)
			require.Equal(t, tc.fires, got.Fires)
			require.Equal(t, tc.through, got.HandledThrough)
			require.Equal(t, tc.next, *got.NextFire)
			require.Len(t, got.Keys, len(tc.fires))
			for i, f := range tc.fires {
				require.Equal(t, "schedule:s:"+f.Format(time.RFC3339), got.Keys[i])
			}
		})
	}
}
