package persistence

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// On one PostgreSQL, the statements are as written; on Citus, q writes their times as Citus
// takes them, and the statements that lock or read every lane are pinned to one.
func TestStatementsOnCitus(t *testing.T) {
	t.Parallel()
	plain := &Store{quoted: `"j"`}
	citus := &Store{quoted: `"j"`, citus: true}

	claim := `WITH t AS (SELECT coalesce($6::timestamptz, statement_timestamp()) AS now) UPDATE {s}.nodes n
		SET deadline = t.now + n.abandon_after_ms * interval '1 millisecond', available_at = coalesce(?::timestamptz, now())`
	require.Equal(t, strings.ReplaceAll(claim, "{s}", `"j"`), plain.q(claim))
	got := citus.q(claim)
	require.Contains(t, got, `(SELECT coalesce($6::timestamptz, statement_timestamp()))`)
	require.Contains(t, got, `(SELECT coalesce(?::timestamptz, now()))`)
	require.Contains(t, got, `((t.now AT TIME ZONE 'UTC') + n.abandon_after_ms * interval '1 millisecond') AT TIME ZONE 'UTC'`)
	require.NotContains(t, got, "t.now + n.abandon_after_ms", "no timestamptz + interval of a column is left")
	require.Equal(t, got, citus.q(claim), "the same again, from the store's cache")

	require.Empty(t, plain.pinned("n", "$1"))
	require.Equal(t, " AND n.lane = ANY($1::smallint[])", citus.pinned("n", "$1"))
	lanes, err := plain.lanesWith(t.Context(), nil, "not sent")
	require.NoError(t, err)
	require.Equal(t, []int16{noLane}, lanes, "one pass, and no statement, on one PostgreSQL")
	require.Empty(t, lanePin("n", noLane))
	require.Equal(t, " AND n.lane = 7", lanePin("n", 7))
	require.Equal(t, " AND lane = 7", lanePin("", 7))

	lanes = []int16{1, 1, 4, 9, 9, 9}
	var runs [][2]int
	for i, j := 0, 0; i < len(lanes); i = j {
		j = citus.runEnd(lanes, i)
		runs = append(runs, [2]int{i, j})
	}
	require.Equal(t, [][2]int{{0, 2}, {2, 3}, {3, 6}}, runs, "a run a lane on Citus")
	require.Equal(t, len(lanes), plain.runEnd(lanes, 0), "one run on one PostgreSQL")
}

// The choice of gated attempts, a recursive statement, is pinned to the lane in each of its
// reads of a per-execution table, which Citus requires of a recursive statement.
func TestChooseGatedQueryIsPinnedToALane(t *testing.T) {
	t.Parallel()
	require.Equal(t, chooseGatedQuery, pinTables(chooseGatedQuery, noLane))
	reads := len(regexp.MustCompile(`FROM \{s\}\.(nodes|executions)`).FindAllStringIndex(chooseGatedQuery, -1))
	require.Equal(t, reads, len(tableWhere.FindAllStringIndex(chooseGatedQuery, -1)), "every read has a WHERE to pin")
	pinned := pinTables(chooseGatedQuery, 5)
	require.Equal(t, reads, strings.Count(pinned, "lane = 5 AND "), "every read is pinned")
	require.Contains(t, pinned, "FROM {s}.nodes c\n\t\t\t\tWHERE c.lane = 5 AND c.state = 'PENDING'")
}
