package main

// These tests are the project's own: main_test.go is the test to copy. The first needs the
// PgBouncer that journey's internal test package starts, which a module of yours cannot import.

import (
	"context"
	"go/parser"
	"go/token"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// The example runs end to end through PgBouncer in transaction mode, with the direct connection
// for LISTEN: the migrations, the writes and the Get's wake-up.
func TestGreetsThroughAPooler(t *testing.T) {
	t.Parallel()
	for _, pooler := range pgtest.Poolers {
		t.Run(pooler.Name, func(t *testing.T) {
			t.Parallel()
			rt, err := journey.New(t.Context(), journey.Config{DatabaseURL: pooler.Start(t), ListenURL: pgtest.URL(t),
				Schema: pgtest.Schema(t), Graphs: []*graph.Graph{onboarding}, Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				require.NoError(t, rt.Stop(ctx))
			})
			var out strings.Builder
			require.NoError(t, greet(t.Context(), &out, rt))
			require.Contains(t, out.String(), "greeting: Welcome, Mario at mario@example.com (revision 4)")
		})
	}
}

// The README gives main_test.go as a test to copy into a module of yours: it imports only the
// standard library and journey's public packages, so that it compiles there as it is.
func TestMainTestIsCopyable(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "main_test.go", nil, parser.ImportsOnly)
	require.NoError(t, err)
	var others []string
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		require.NoError(t, err)
		first, _, _ := strings.Cut(path, "/")
		journeys := path == "github.com/journey-go/journey" || strings.HasPrefix(path, "github.com/journey-go/journey/")
		if journeys && strings.Contains(path, "/internal/") || !journeys && strings.Contains(first, ".") {
			others = append(others, path)
		}
	}
	require.Empty(t, others, "main_test.go imports what a module of yours cannot import (journey's internal packages), "+
		"or can only once it requires another module")
}
