package main

import (
	"errors"
	"strings"
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

// The program's own code, greet, runs on the test's runtime (rt.Runtime is a *journey.Runtime),
// and prints what it did.
func TestGreetPrintsWhatItDid(t *testing.T) {
	t.Parallel()
	rt := journeytest.New(t, onboarding)
	var out strings.Builder
	if err := greet(t.Context(), &out, rt.Runtime); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"set name  -> revision 1",
		"set email -> revision 2",
		"greeting: Welcome, Mario at mario@example.com (revision 4)",
		"  greeting attempt 1/3: SUCCESS",
	} {
		if !strings.Contains(out.String(), "\n"+want+"\n") {
			t.Errorf("greet printed no line %q; it printed:\n%s", want, out.String())
		}
	}
}
