package journey_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The engine's packages stand at the top level, and their imports follow the design's direction:
// graph ← persistence ← sweeper, actors ← journey. Tests may import what they need.
func TestEngineImportDirection(t *testing.T) {
	t.Parallel()
	const module = "github.com/journey-go/journey"
	ours := func(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }
	oneOf := func(paths ...string) func(string) bool {
		return func(path string) bool { return slices.Contains(paths, path) }
	}
	forbidden := map[string]func(string) bool{
		"graph":       ours, // nothing of ours
		"persistence": oneOf(module, module+"/actors", module+"/sweeper", module+"/journeyui"),
		"sweeper":     oneOf(module, module+"/actors", module+"/journeyui"),
		"actors":      oneOf(module, module+"/sweeper", module+"/journeyui"),
	}
	for dir, banned := range forbidden {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		require.NotEmpty(t, files, "package %s stands at the top level", dir)
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
			require.NoError(t, err)
			for _, spec := range f.Imports {
				path, err := strconv.Unquote(spec.Path.Value)
				require.NoError(t, err)
				if banned(path) {
					t.Errorf("%s imports %s, against the design's import direction", file, path)
				}
			}
		}
	}
}
