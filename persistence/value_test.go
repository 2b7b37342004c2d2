package persistence

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/internal/pgtest"
)

// TestCheckValueAgreesWithJSONB checks that CheckValue rejects exactly the JSON texts that
// PostgreSQL's jsonb rejects for a NUL.
func TestCheckValueAgreesWithJSONB(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	for _, tc := range []struct {
		raw string
		nul bool
	}{
		{`"plain"`, false},
		{`"\u0000"`, true},
		{`"a\u0000b"`, true},
		{`{"k\u0000": 1}`, true},
		{`["x", "\"\u0000"]`, true},
		{`"\\u0000"`, false},      // a backslash, then u0000
		{`"\\\u0000"`, true},      // a backslash, then a NUL
		{`"\\\\u0000"`, false},    // two backslashes, then u0000
		{`"\u00000"`, true},       // a NUL, then 0
		{`"\u0001\u0020"`, false}, // other control characters are stored
		{`"\\"`, false},
		{`"u0000"`, false},
	} {
		_, err := db.ExecContext(t.Context(), "SELECT $1::jsonb", tc.raw)
		require.Equal(t, !tc.nul, err == nil, "%s: PostgreSQL: %v", tc.raw, err)
		err = CheckValue(json.RawMessage(tc.raw), 0)
		if tc.nul {
			require.ErrorContains(t, err, "NUL", tc.raw)
		} else {
			require.NoError(t, err, tc.raw)
		}
	}
}

// CheckValue rejects a JSON text that is not valid UTF-8, as jsonb does: a json.RawMessage keeps
// its bytes through json.Marshal.
func TestCheckValueRefusesInvalidUTF8(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	for _, raw := range []string{"\"a\xffb\"", "[\"\xc3\"]", "{\"\xe2\x9c\": 1}"} {
		_, err := db.ExecContext(t.Context(), "SELECT $1::jsonb", raw)
		require.Error(t, err, "%q: PostgreSQL", raw)
		require.ErrorContains(t, CheckValue(json.RawMessage(raw), 0), "not valid UTF-8", "%q", raw)
	}
	require.NoError(t, CheckValue(json.RawMessage(`"größe ✓"`), 0))
}

func TestCheckValueLimitsTheSize(t *testing.T) {
	t.Parallel()
	require.NoError(t, CheckValue(json.RawMessage(`"12345678"`), 10), "at the limit")
	err := CheckValue(json.RawMessage(`"123456789"`), 10)
	require.ErrorContains(t, err, "11 bytes")
	require.ErrorContains(t, err, "limit of 10 bytes")
	require.ErrorContains(t, err, "Config.MaxValueBytes")
	require.NoError(t, CheckValue(json.RawMessage(`"123456789"`), 0), "no limit")
}
