package main

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/journeytest"
)

// TestMain stops the throwaway PostgreSQL that the tests start when TEST_DATABASE_URL is unset.
func TestMain(m *testing.M) { journeytest.Main(m) }

func TestGreeting(t *testing.T) {
	t.Parallel()
	rt := journeytest.New(t, onboarding)
	ex, err := rt.Start(t.Context(), onboarding, journey.WithValues(map[string]any{
		"name": "Mario", "email": "mario@example.com",
	}))
	if err != nil {
		t.Fatal(err)
	}
	rt.RequireValue(ex.ID, "greeting", "Welcome, Mario at mario@example.com")

	// A new email recomputes the greeting; RequireValue waits for it.
	if _, err := rt.Set(t.Context(), ex.ID, "email", "mario@mushroom.kingdom"); err != nil {
		t.Fatal(err)
	}
	rt.RequireValue(ex.ID, "greeting", "Welcome, Mario at mario@mushroom.kingdom")
}

func TestNoGreetingWithoutAnEmail(t *testing.T) {
	t.Parallel()
	rt := journeytest.New(t, onboarding)
	ex, err := rt.Start(t.Context(), onboarding, journey.WithValues(map[string]any{"name": "Mario"}))
	if err != nil {
		t.Fatal(err)
	}
	rt.WaitIdle(ex.ID)
	if _, err := rt.Get(t.Context(), ex.ID, "greeting"); !errors.Is(err, journey.ErrNotSet) {
		t.Fatalf("greeting without an email: got %v, want journey.ErrNotSet", err)
	}
}

// The example runs end to end through PgBouncer in transaction mode, with the direct connection
// for LISTEN: the migrations, the writes and the Get's wake-up.
func TestGreetsThroughAPooler(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	cfg := journey.Config{DatabaseURL: pgtest.Bouncer(t), ListenURL: pgtest.URL(t), Schema: pgtest.Schema(t)}
	require.NoError(t, greet(t.Context(), &out, slog.New(slog.DiscardHandler), cfg))
	require.Contains(t, out.String(), "greeting: Welcome, Mario at mario@example.com (revision 4)")
}
