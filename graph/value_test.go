package graph

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValueAccessors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		raw   string // JSON; "-" for a value that is not set
		set   bool
		str   string
		int   int64
		float float64
		bool  bool
	}{
		{name: "unset", raw: "-"},
		{name: "string", raw: `"Mario"`, set: true, str: "Mario"},
		{name: "string of a number", raw: `"42"`, set: true, str: "42"},
		{name: "integer", raw: `42`, set: true, str: "42", int: 42, float: 42},
		{name: "negative", raw: ` -7 `, set: true, str: "-7", int: -7, float: -7},
		{name: "fraction", raw: `2.75`, set: true, str: "2.75", int: 2, float: 2.75},
		{name: "exponent", raw: `1e3`, set: true, str: "1e3", int: 1000, float: 1000},
		{name: "too big for int64", raw: `1e300`, set: true, str: "1e300", int: 0, float: 1e300},
		{name: "largest int64", raw: `9223372036854775807`, set: true, str: "9223372036854775807", int: 1<<63 - 1, float: 1 << 63},
		{name: "true", raw: `true`, set: true, str: "true", bool: true},
		{name: "false", raw: `false`, set: true, str: "false"},
		{name: "null", raw: `null`, set: true, str: "null"},
		{name: "object", raw: `{"a":1}`, set: true, str: `{"a":1}`},
		{name: "array", raw: `[1,2]`, set: true, str: `[1,2]`},
		{name: "minus zero", raw: `-0`, set: true, str: "-0"},
		{name: "signed exponent", raw: `1.5E+3`, set: true, str: "1.5E+3", int: 1500, float: 1500},
		{name: "negative exponent", raw: `25e-1`, set: true, str: "25e-1", int: 2, float: 2.5},
	}
	// Not JSON numbers: none is a number to Int and Float.
	for _, raw := range []string{`01`, `1.`, `-x`, `1e`, `1e+`, `+1`, `.5`, `1 2`, `--1`, `1.5.2`, `0x10`, `NaN`, `1,`} {
		tests = append(tests, struct {
			name  string
			raw   string
			set   bool
			str   string
			int   int64
			float float64
			bool  bool
		}{name: "not a number " + raw, raw: raw, set: true, str: raw})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			var v Value
			if tt.raw != "-" {
				v.Raw = json.RawMessage(tt.raw)
			}
			vals := Values{"x": v}

			require.Equal(t, tt.set, v.IsSet())
			require.Equal(t, tt.set, vals.Has("x"))
			require.Equal(t, tt.str, v.String())
			require.Equal(t, tt.str, vals.String("x"))
			require.Equal(t, tt.int, v.Int())
			require.Equal(t, tt.int, vals.Int("x"))
			require.InDelta(t, tt.float, v.Float(), 1e-9)
			require.InDelta(t, tt.float, vals.Float("x"), 1e-9)
			require.Equal(t, tt.bool, v.Bool())
			require.Equal(t, tt.bool, vals.Bool("x"))
		})
	}
}

func TestValuesOfMissingNode(t *testing.T) {
	t.Parallel()

	var vals Values // a nil map reads as empty
	require.False(t, vals.Has("x"))
	require.Empty(t, vals.String("x"))
	require.Zero(t, vals.Int("x"))
	require.Zero(t, vals.Float("x"))
	require.False(t, vals.Bool("x"))
}

func TestDecode(t *testing.T) {
	t.Parallel()

	type user struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	vals := valuesOf(t, map[string]any{
		"user": user{Name: "Mario", Tags: []string{"a", "b"}},
		"n":    "not a number",
	})

	t.Run("value", func(t *testing.T) {
		t.Parallel()

		var u user
		require.NoError(t, vals["user"].Decode(&u))
		require.Equal(t, user{Name: "Mario", Tags: []string{"a", "b"}}, u)

		err := Value{}.Decode(&u)
		require.ErrorIs(t, err, ErrNotSet)
		require.Contains(t, err.Error(), "not set")

		var n int
		require.Error(t, vals["n"].Decode(&n))
	})

	t.Run("values", func(t *testing.T) {
		t.Parallel()

		var u user
		require.NoError(t, vals.Decode("user", &u))
		require.Equal(t, "Mario", u.Name)

		err := vals.Decode("missing", &u)
		require.ErrorIs(t, err, ErrNotSet)
		require.Contains(t, err.Error(), `"missing"`)
		require.Contains(t, err.Error(), "not set")

		var n int
		err = vals.Decode("n", &n)
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrNotSet)
		require.Contains(t, err.Error(), `"n"`)
	})
}
