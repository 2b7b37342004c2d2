package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/examples/internal/exampletest"
)

func TestOrderFulfilment(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{
		"order A-1001 of alice: execution.completed, shipped with tracking number TRK-A-1001",
		"  reservation attempt 1 of 3: SUCCESS",
		"  payment     attempt 1 of 3: SUCCESS",
		"  shipment    attempt 1 of 3: SUCCESS",
		"order A-1002 of alice: execution.completed, shipped with tracking number TRK-A-1002",
		"  reservation attempt 1 of 3: SUCCESS",
		"  payment     attempt 1 of 3: SUCCESS",
		"  shipment    attempt 1 of 3: SUCCESS",
		"order B-2001 of bob: execution.failed, payment failed after 1 attempt(s): card 0002 declined",
		"  stock released RSV-B-2001 (card 0002 declined)",
		"  reservation attempt 1 of 3: FAILED, warehouse timed out",
		"  reservation attempt 2 of 3: SUCCESS",
		"  payment     attempt 1 of 3: FAILED, card 0002 declined",
		"  restock     attempt 1 of 5: SUCCESS",
		"payments of alice running at once, at most: 1",
		"payments of bob running at once, at most: 1",
	}, exampletest.Run(t, run))
}
