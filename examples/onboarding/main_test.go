package main

import (
	"errors"
	"testing"

	"github.com/journey-go/journey"
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
