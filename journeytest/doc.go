// Package journeytest is a test kit for the graphs of journey's users: a runtime per test on a
// schema of its own, a clock that the test moves, and helpers that wait and require, failing the
// test with a message that shows the execution.
//
// # A runtime per test
//
// New starts a runtime that serves the graphs given, on a fresh schema that is dropped when the
// test ends, after the runtime is stopped. Tests that call it may run in parallel:
//
//	func TestGreeting(t *testing.T) {
//		t.Parallel()
//		rt := journeytest.New(t, onboarding)
//		ex, err := rt.Start(t.Context(), onboarding, journey.WithValues(map[string]any{
//			"name": "Mario", "email": "mario@example.com",
//		}))
//		if err != nil {
//			t.Fatal(err)
//		}
//		rt.RequireValue(ex.ID, "greeting", "Welcome, Mario at mario@example.com")
//	}
//
// The Runtime embeds *journey.Runtime: Start, Set, Get, Computations and the rest work as in
// production. NewWithConfig takes a journey.Config for other settings, such as MaxWorkers or
// OnExecutionFailed.
//
// # The database
//
// The database is TEST_DATABASE_URL, if it is set. Otherwise the first New starts a throwaway
// PostgreSQL cluster from the local server binaries (apt-get install postgresql; see package
// devpg), which every test of the test binary shares. To stop and remove it when the tests end,
// call Main from TestMain:
//
//	func TestMain(m *testing.M) { journeytest.Main(m) }
//
// Without Main, the server dies with the test binary.
//
// # Time
//
// The runtime's clock is the test's. It stands still, so that nothing that waits for time
// happens by itself, until the test moves it with Advance. A move does at once what it makes due:
// a tick fires, a retry whose backoff has passed runs, a computation past its deadline is
// abandoned. A graph with an hour's tick and a ten-minute backoff runs to its end in a fraction
// of a second:
//
//	rt.WaitIdle(ex.ID)           // the tick has chosen its time
//	rt.Advance(time.Hour)        // the tick fires; the send fails, and its retry waits 10 minutes
//	rt.WaitIdle(ex.ID)
//	rt.Advance(10 * time.Minute) // the retry runs
//	rt.RequireValue(ex.ID, "send", "sent")
//
// For this, the graph's functions take the time from journey.Now(ctx) rather than time.Now: a
// tick returns journey.Now(ctx).Add(time.Hour). In production the two are the same.
//
// # Helpers
//
// WaitValue waits for a node's value. WaitIdle waits until an execution has nothing to do before
// the clock moves. RequireValue and RequireFailed wait for that, then require a node's value, or
// its failure with a matching error. Each wait is woken by the database or polls it, never
// sleeps for a fixed time, and ends after DefaultTimeout, or sooner if the test's deadline is
// near. A helper that fails calls the test's Fatalf with what is wrong, the execution's Summarize
// (its values, attempts, and what each node waits for) and the test clock's time:
//
//	journeytest: node "send" of execution REM1W9… did not fail, and has no value
//
//	Execution REM1W9… of graph "reminder" version "v1", revision 5
//	...
//	Test clock: 2025-05-02T10:14:03.000Z
//	  send attempt 2 is due in 10m0s: Advance moves the clock
//
// This package belongs to the journey module, and its API names only journey's public types.
package journeytest
