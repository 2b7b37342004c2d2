package clock

import (
	"testing"
	"time"
)

func TestStubTellsItsMoves(t *testing.T) {
	t.Parallel()
	start := time.Date(2025, 5, 2, 10, 0, 0, 0, time.UTC)
	s := NewStub(start)
	var seen []time.Time
	remove := s.OnMove(func() { seen = append(seen, s.Now()) }) // reading the clock does not deadlock
	s.Advance(time.Hour)
	s.Set(start.Add(2 * time.Hour))
	remove()
	s.Advance(time.Hour)
	want := []time.Time{start.Add(time.Hour), start.Add(2 * time.Hour)}
	if len(seen) != len(want) || !seen[0].Equal(want[0]) || !seen[1].Equal(want[1]) {
		t.Fatalf("the observer saw %v, want %v (and nothing once removed)", seen, want)
	}
	if got := s.Now(); !got.Equal(start.Add(3 * time.Hour)) {
		t.Fatalf("Now() = %v, want %v", got, start.Add(3*time.Hour))
	}
}
