package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/examples/internal/exampletest"
)

func TestWebhookReceiver(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{
		"signup of ada@example.com: received execution.completed: 204, acted on",
		"signup of bob@example.invalid: received execution.failed (welcome_email: bob@example.invalid bounced): 204, acted on",
		"the same delivery again: 200, dropped as a repeat",
		"a forged delivery: 401, rejected: journey: webhook signature does not match: wrong secret, or the body was altered",
	}, exampletest.Run(t, run))
}
