package persistence

import (
	"crypto/rand"
	"hash/fnv"
	"strings"
	"time"
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
