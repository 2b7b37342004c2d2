package machine

import (
	"fmt"
	"regexp"
)

// storePanic matches the error that the store records when user code that it calls panics: a
// gate, a ConcurrencyKey or a Backoff (see recovered and holds). Such a panic fails the node at
// once. A panic of the node's own function is an ordinary error, `computation of "x" panicked:
// ...`, which is retried like any other.
var storePanic = regexp.MustCompile(` of node "(?:[^"\\]|\\.)*" ` + errUserPanic.Error() + `: `)

// Failure says how a node failed for good, from its newest attempt as stored: its state, its
// attempt, its max_attempts and its error. It reads as the predicate of a sentence whose subject
// is the node, and leaves the error out:
//
//   - "failed at attempt 1 of 3 because user code panicked": a gate, ConcurrencyKey or Backoff
//     panicked, which fails the node at once;
//   - "failed permanently at attempt 2 of 4": before its last attempt, so its error was not
//     retried: the function returned graph.Permanent, or a result that cannot be stored;
//   - "used up its 4 attempts": the last attempt failed, or was abandoned.
//
// The store does not keep whether an error was permanent: one returned by the last attempt reads
// as used up, which it is too. Failure returns "" for an attempt that is neither FAILED nor
// ABANDONED.
func Failure(state string, attempt, maxAttempts int, errText string) string {
	switch {
	case state != StateFailed && state != StateAbandoned:
		return ""
	case storePanic.MatchString(errText):
		return fmt.Sprintf("failed at attempt %d of %d because user code panicked", attempt, maxAttempts)
	case attempt < maxAttempts:
		return fmt.Sprintf("failed permanently at attempt %d of %d", attempt, maxAttempts)
	case attempt == 1:
		return "used up its 1 attempt"
	default:
		return fmt.Sprintf("used up its %d attempts", attempt)
	}
}
