package graph

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPermanent(t *testing.T) {
	t.Parallel()

	require.NoError(t, Permanent(nil))
	require.False(t, IsPermanent(nil))

	base := &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist}
	require.False(t, IsPermanent(base))

	err := Permanent(base)
	require.True(t, IsPermanent(err))
	require.Equal(t, base.Error(), err.Error(), "the message is unchanged")
	require.ErrorIs(t, err, fs.ErrNotExist)
	var pathErr *fs.PathError
	require.ErrorAs(t, err, &pathErr)
	require.Same(t, base, pathErr)

	wrapped := fmt.Errorf("charging card: %w", err)
	require.True(t, IsPermanent(wrapped), "wrapping keeps it permanent")
	require.ErrorIs(t, wrapped, fs.ErrNotExist)

	require.Same(t, err, Permanent(err), "marking twice changes nothing")
	require.True(t, IsPermanent(errors.Join(errors.New("other"), err)))
}

func TestDefaultBackoff(t *testing.T) {
	t.Parallel()

	for attempt, want := range map[int]time.Duration{
		-1:      time.Second, // values below 1 count as 1
		0:       time.Second,
		1:       time.Second,
		2:       2 * time.Second,
		3:       4 * time.Second,
		5:       16 * time.Second,
		9:       256 * time.Second,
		10:      5 * time.Minute, // 512s, capped
		64:      5 * time.Minute, // no overflow
		1 << 30: 5 * time.Minute,
	} {
		lo := time.Duration(float64(want) * 0.8)
		hi := time.Duration(float64(want) * 1.2)
		minSeen, maxSeen := hi, lo
		for range 200 {
			d := DefaultBackoff(attempt)
			require.GreaterOrEqual(t, d, lo, "attempt %d", attempt)
			require.LessOrEqual(t, d, hi, "attempt %d", attempt)
			minSeen, maxSeen = min(minSeen, d), max(maxSeen, d)
		}
		require.Greater(t, maxSeen, minSeen, "attempt %d: backoff is jittered", attempt)
	}

	// It grows: below the cap, even the shortest wait after an attempt (0.8 of 2^a seconds)
	// is longer than the longest after the one before (1.2 of 2^(a-1) seconds).
	for attempt := 1; attempt < 9; attempt++ {
		require.Less(t, DefaultBackoff(attempt), DefaultBackoff(attempt+1), "attempt %d", attempt)
	}
}
