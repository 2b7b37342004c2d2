package devpg

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrNoBinaries is returned by Start when the PostgreSQL server binaries cannot be found.
var ErrNoBinaries = errors.New("PostgreSQL server binaries not found (initdb, postgres): " +
	"install them with `apt-get install postgresql`, or use a running server (DATABASE_URL, or TEST_DATABASE_URL in tests)")

// debianRoot is where Debian and Ubuntu install one directory of server binaries per major version.
const debianRoot = "/usr/lib/postgresql"

// binaries are the paths of the server programs a cluster needs.
type binaries struct {
	initdb   string
	postgres string
}

// findBinaries looks for initdb and postgres on PATH first, then under
// /usr/lib/postgresql/<version>/bin, newest version first.
func findBinaries() (binaries, error) {
	if initdb, err := exec.LookPath("initdb"); err == nil {
		// Use the postgres next to initdb (after resolving symlinks), so that the two come from
		// the same installation; fall back to PATH.
		if resolved, err := filepath.EvalSymlinks(initdb); err == nil {
			if pg := filepath.Join(filepath.Dir(resolved), "postgres"); isExecutable(pg) {
				return binaries{initdb: initdb, postgres: pg}, nil
			}
		}
		if pg, err := exec.LookPath("postgres"); err == nil {
			return binaries{initdb: initdb, postgres: pg}, nil
		}
	}
	for _, dir := range versionDirs(debianRoot) {
		bin := filepath.Join(dir, "bin")
		b := binaries{initdb: filepath.Join(bin, "initdb"), postgres: filepath.Join(bin, "postgres")}
		if isExecutable(b.initdb) && isExecutable(b.postgres) {
			return b, nil
		}
	}
	return binaries{}, ErrNoBinaries
}

// versionDirs lists the version directories under root, newest first. Versions compare
// numerically component by component, so 9.6 < 10 < 15 < 16.1.
func versionDirs(root string) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	type dir struct {
		path    string
		version []int
	}
	var dirs []dir
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		v, ok := parseVersion(e.Name())
		if !ok {
			continue
		}
		dirs = append(dirs, dir{path: filepath.Join(root, e.Name()), version: v})
	}
	slices.SortFunc(dirs, func(a, b dir) int { return slices.Compare(b.version, a.version) })
	paths := make([]string, len(dirs))
	for i, d := range dirs {
		paths[i] = d.path
	}
	return paths
}

func parseVersion(s string) ([]int, bool) {
	parts := strings.Split(s, ".")
	v := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, false
		}
		v[i] = n
	}
	return v, true
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
