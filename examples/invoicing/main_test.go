package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/examples/internal/exampletest"
	"github.com/journey-go/journey/journeytest"
)

// TestMain stops the throwaway PostgreSQL that the tests start when TEST_DATABASE_URL is unset.
func TestMain(m *testing.M) { journeytest.Main(m) }

// The schedule starts the billing runs by itself, and each run's Map collects its customers'
// invoices, each a child execution, in the customers' order.
func TestInvoicing(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{
		"billing 3 customers every 2s, an invoice each as a child execution",
		"run 1: 3 invoices: ada 42.00, bob 17.50, cy 5.00",
		"run 2: 3 invoices: ada 42.00, bob 17.50, cy 5.00",
	}, exampletest.Run(t, run))
}
