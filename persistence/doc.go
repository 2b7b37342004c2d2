// Package persistence is where all of journey-go's SQL lives. Nothing else in the project writes a
// query.
//
// A Store wraps a bun.DB on pgx's stdlib driver (simple protocol) and offers one method per operation: create an
// execution, set values, claim computations, extend a heartbeat, complete or fail an attempt,
// abandon expired attempts, promote pending ones. Every method that writes to an execution also
// advances it (gates, new computations, invalidation) in the same transaction, serialised per
// execution by the lock on its executions row. Record writes the outcomes of many attempts in one
// transaction, with set-based statements. A write goes out in as few round trips as it can (see
// txn): the BEGIN, the lock and the loads in one pgx batch on the transaction's connection, the
// new attempts and the revisions with the COMMIT, and the NOTIFY after it (see notes).
//
// Writes made on behalf of a running computation are fenced: they match only a row that is still
// RUNNING under the same replica and claim token, so a computation that lost its claim can never
// write.
//
// Lock order, which every transaction follows to stay free of deadlocks: computation rows first
// (completions through their fenced UPDATE, in id order; an abandonment with SKIP LOCKED), then
// the executions rows, in id order, then, last, the promotion lock. A schedule's row
// (FireSchedule) comes before all of them: its transaction locks nothing else first. The holder
// of the promotion lock waits for nothing else, and a write that finds it busy does not wait for
// it: it promotes after its commit. Claims and heartbeats never wait for a lock (SKIP LOCKED, on
// the executions rows too for a claim), and background work (sweeps, tick wake-ups, promotions,
// schedules) gives up on a lock after the store's LockTimeout.
// Advancing never updates an existing computation row that another transaction could hold.
//
// User code that the store calls (gates, concurrency keys, backoffs) is run under recover: a
// panic fails the node concerned, with the panic's text, and nothing else.
//
// It may import graph and internal packages, never actors, sweeper or the root package.
//
// It is one of the engine's parts, which the project's design card puts at the top level. Its API
// carries no compatibility promise before v1: build on the root package, journey, which wires the
// parts together.
package persistence
