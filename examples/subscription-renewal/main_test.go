package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/examples/internal/exampletest"
)

func TestSubscriptionRenewal(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{
		"subscribed ada, billing card 4242 every cycle",
		"cycle 3: 12.00 from card 4242: declined, insufficient funds; billing paused until the card is updated",
		"card updated to 5555, cancelled after cycle 4: billing resumed",
		"last cycle paid: subscription archived, Load finds it only with IncludeArchived",
		"payment history, newest first:",
		"  cycle 4: 12.00 from card 5555: paid, the last cycle",
		"  cycle 3: 12.00 from card 5555: paid",
		"  cycle 3: 12.00 from card 4242: declined, insufficient funds",
		"  cycle 2: 12.00 from card 4242: paid",
		"  cycle 1: 12.00 from card 4242: paid",
	}, exampletest.Run(t, run))
}
