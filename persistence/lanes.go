package persistence

import (
	"context"
	"crypto/rand"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// Lanes is the number of lanes. Every row of an execution carries the execution's lane, a number
// below Lanes fixed at Start, and every key of a per-execution table leads with it: a distributed
// PostgreSQL (Citus) can keep each lane's rows together, and a write of one execution touches one
// lane. A keyed Start takes the lane of its key (laneOfKey), so that the key's uniqueness is
// decided in one lane; another takes a random one.
const Lanes = 64

// idAlphabet avoids letters that read alike (I, L, O, U).
const idAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// newID returns prefix and 20 characters of idAlphabet: the first 10 write the time in
// milliseconds, the next 2 the lane, and the last 8 are random (40 bits). Ids made later sort
// after, so new rows go to the right edge of the indexes keyed by execution id, where their pages
// are already in cache, rather than to a random page of each; ids made in the same millisecond
// differ by their random part.
func newID(prefix string, lane int16, now time.Time) string {
	var b [20]byte
	_, _ = rand.Read(b[12:]) // crypto/rand.Read never fails
	for i := 12; i < len(b); i++ {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	b[10], b[11] = idAlphabet[lane/32], idAlphabet[lane%32]
	ms := uint64(now.UnixMilli())
	for i := 9; i >= 0; i-- {
		b[i] = idAlphabet[ms%uint64(len(idAlphabet))]
		ms /= uint64(len(idAlphabet))
	}
	return prefix + string(b[:])
}

// LaneOf returns the lane of execution id, which its characters 11 and 12 from the last 20 write.
// An id that newID did not make (one made before lanes, or no id at all) reads as whatever lane
// its characters spell; migration 0025 gave the executions made before lanes those lanes.
func LaneOf(id string) int16 {
	if len(id) < 20 {
		return 0
	}
	hi := strings.IndexByte(idAlphabet, id[len(id)-10])
	lo := strings.IndexByte(idAlphabet, id[len(id)-9])
	return int16((max(hi, 0)*32 + max(lo, 0)) % Lanes)
}

// executionKeys is a FROM item of the distinct (lane, id) pairs of the arrays lanes and ids (SQL
// expressions): a join on it finds each execution's rows through the keys that lead with the
// lane. (lane = ANY(lanes) AND id = ANY(ids) would probe every lane with every id.)
func executionKeys(lanes, ids string) string {
	return `(SELECT DISTINCT lane, id FROM unnest(` + lanes + `::smallint[], ` + ids + `::text[]) AS k(lane, id))`
}

// laneOfKey is the lane of the executions of graph graphName started with key.
func laneOfKey(graphName, key string) int16 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(graphName))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(key))
	return int16(h.Sum32() % Lanes)
}

// randomLane returns a lane at random, for an execution without a key.
func randomLane() int16 {
	var b [1]byte
	_, _ = rand.Read(b[:])
	return int16(b[0]) % Lanes
}

// pinned is the condition that pins the rows of alias to the lanes of param, an array of one lane
// (see runEnd), on Citus; on one PostgreSQL, nothing. Citus locks rows (FOR UPDATE), and sends
// a statement to one shard alone, only when it names one value of the distribution column.
func (s *Store) pinned(alias, param string) string {
	if !s.citus {
		return ""
	}
	return " AND " + alias + ".lane = ANY(" + param + "::smallint[])"
}

// onLanes is a statement whose rows of one alias are found by the lanes of its array $1: [0] as
// written, for one PostgreSQL, and [1] with those rows pinned to the lanes (see pinned), which on
// Citus sends it to their shards alone, rather than to every shard with a lock on each. A join
// on the lanes of unnest($1) does not tell Citus which shards the statement touches.
type onLanes [2]string

// pinLanes returns the two forms of query, whose {pin} is where alias's rows are pinned.
func pinLanes(query, alias string) onLanes {
	return onLanes{strings.Replace(query, "{pin}", "", 1), strings.Replace(query, "{pin}", " AND "+alias+".lane = ANY($1::smallint[])", 1)}
}

// form is the form of q for the store's layout, with its schema (see q).
func (s *Store) form(q onLanes) string {
	if s.citus {
		return s.q(q[1])
	}
	return s.q(q[0])
}

// runEnd is the end of the run of lanes that begins at i, for the statements sent once a lane
// (see pinned): on Citus, the first index after i of another lane; on one PostgreSQL, the end of
// lanes, which are then one run. lanes are sorted.
func (s *Store) runEnd(lanes []int16, i int) int {
	if !s.citus {
		return len(lanes)
	}
	j := i + 1
	for j < len(lanes) && lanes[j] == lanes[i] {
		j++
	}
	return j
}

// noLane is the lane of lanesWith's one pass on one PostgreSQL: it pins nothing.
const noLane = -1

// onePass is lanesWith's passes on one PostgreSQL. Read only.
var onePass = []int16{noLane}

// lanesWith is the passes of a statement over every lane that has rows to read or write, which
// query, a SELECT of lanes with args, finds: on Citus, the lanes it returns, in order, found by a
// read of every shard that locks nothing, before a statement a lane that locks what it finds; on
// one PostgreSQL, one pass, noLane, and no query.
func (s *Store) lanesWith(ctx context.Context, db bun.IDB, query string, args ...any) ([]int16, error) {
	if !s.citus {
		return onePass, nil
	}
	var lanes []int16
	err := db.NewRaw(s.q(`SELECT DISTINCT l.lane FROM (`+query+`) l ORDER BY l.lane`), args...).Scan(ctx, &lanes)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("finding the lanes with work: %w", err)
	}
	return lanes, nil
}

// lanePin is the condition that pins the rows of alias (or of the one table, "") to lane, a
// pass of lanesWith: nothing for noLane. The lane is written into the statement, where Citus
// reads it to send the statement to its shard alone.
func lanePin(alias string, lane int16) string {
	if lane == noLane {
		return ""
	}
	if alias != "" {
		alias += "."
	}
	return " AND " + alias + "lane = " + strconv.Itoa(int(lane))
}

// laneOn is lanePin on Citus, and nothing on one PostgreSQL.
func (s *Store) laneOn(alias string, lane int16) string {
	if !s.citus {
		return ""
	}
	return lanePin(alias, lane)
}

// pinnedArgs are the arguments of pinned with the placeholder "?", lanes as an array, on Citus;
// on one PostgreSQL, none.
func (s *Store) pinnedArgs(lanes []int16) []any {
	if !s.citus {
		return nil
	}
	return []any{pgdialect.Array(lanes)}
}
