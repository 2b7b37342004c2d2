// Package sweeper holds the sweeper actor. Any replica may sweep; passes are single-flight across
// the replicas that serve the same graphs through a lease in the database, which the holder
// renews at each pass and which a frozen or dead holder loses once it runs out. A pass abandons
// RUNNING computations past their deadline or heartbeat deadline, or held by a replica that
// stopped heartbeating or restarted (recording which), retries them or fails their node, promotes
// PENDING computations that are due, advances the executions whose ticks have come due, and
// prunes: the heartbeat rows of long-gone replicas, and what Retention lets go. The decisions are
// made in SQL against the Store's clock, so tests move an injected clock instead of sleeping.
//
// It may import graph, persistence and internal packages, never actors or the root package. It
// writes no SQL: persistence holds all of it.
//
// It is one of the engine's parts, which the project's design card puts at the top level. Its API
// carries no compatibility promise before v1: build on the root package, journey, which wires the
// parts together.
package sweeper
