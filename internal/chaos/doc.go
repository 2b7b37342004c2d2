// Package chaos proves, with real processes, that work survives dead replicas: its tests start
// replicas as separate OS processes (the test binary, re-executed as a worker) against one
// database, then SIGKILL, SIGSTOP, restart them or restart PostgreSQL, and check from the
// database that every execution completed and that no value was written twice.
//
// It holds tests only. `make chaos` runs them repeatedly with their figures printed. TestSoak
// runs a mix of graphs under load with all of those faults for a minute, or for
// JOURNEY_SOAK_DURATION: `make soak` runs it for 10 minutes.
package chaos
