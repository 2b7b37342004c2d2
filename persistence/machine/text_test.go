package machine

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestStorable(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                "",
		"plain":           "plain",
		"ünïcode ✓":       "ünïcode ✓",
		"a\x00b\x00":      "a\uFFFDb\uFFFD",
		"a\xffb\xc3":      "a\uFFFDb\uFFFD",
		"\xe2\x9c x\x00y": "\uFFFD x\uFFFDy",
	} {
		require.Equal(t, want, Storable(in), "Storable(%q)", in)
	}

	at := strings.Repeat("a", MaxTextBytes)
	require.Equal(t, at, Storable(at), "a text at the limit is kept whole")
	long := strings.Repeat("✓", MaxTextBytes) // 3 bytes each
	got := Storable(long)
	require.LessOrEqual(t, len(got), MaxTextBytes)
	require.True(t, utf8.ValidString(got), "cut at a character boundary")
	kept := strings.Count(got, "✓")
	require.Equal(t, fmt.Sprintf("%s… (%d bytes cut)", strings.Repeat("✓", kept), len(long)-3*kept), got)
}

func TestCheckKey(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"":                                 "",
		"tenant-42":                        "",
		"größe ✓":                          "",
		strings.Repeat("k", MaxKeyBytes):   "",
		"k\x00":                            "it holds a NUL character (byte 1)",
		"ab\xff":                           "it is not valid UTF-8 (byte 2 is 0xff)",
		strings.Repeat("k", MaxKeyBytes+1): "it is 1025 bytes long, over the limit of 1024",
	} {
		err := CheckKey(key)
		if want == "" {
			require.NoError(t, err, "CheckKey(%q)", key)
		} else {
			require.EqualError(t, err, want, "CheckKey(%q)", key)
		}
	}
}
