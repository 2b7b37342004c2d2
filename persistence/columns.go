package persistence

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Every read names its columns. A replica of the previous release runs beside this one during a
// rolling deploy, against the schema that this one migrated: a `SELECT *` there would bring it a
// column that its structs do not know, and fail every write it makes. The lists come from the
// structs the rows are scanned into, so that a field and its column cannot drift apart.
var (
	executionColumns   = tableColumns[Execution]()
	computationColumns = tableColumns[Computation]()
	requestColumns     = tableColumns[Request]()
	replicaColumns     = tableColumns[Replica]("stale")
	versionColumns     = tableColumns[GraphVersion]()
	reclaimColumns     = tableColumns[Reclaim]()
)

// tableColumns returns the column of each field of T, as its bun tag names it, embedded structs'
// fields included, but the fields tagged "-" and the columns computed by the query (computed).
func tableColumns[T any](computed ...string) []string {
	var names []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("bun"), ",")
			switch {
			case name == "-":
			case f.Anonymous && f.Type.Kind() == reflect.Struct && name == "":
				walk(f.Type)
			case name != "" && !slices.Contains(computed, name):
				names = append(names, name)
			}
		}
	}
	walk(reflect.TypeFor[T]())
	return names
}

// executionRead selects an execution of the executions table alias as Execution scans it: its
// revision is the greatest of the row's and of its node rows', and its updated_at their latest,
// since the hot path writes the node rows alone. pin is a condition on those node rows (n) that
// pins them to the execution's lane on Citus (see pinned), or "".
func (s *Store) executionRead(alias, pin string) string {
	names := make([]string, len(executionColumns))
	for i, c := range executionColumns {
		switch c {
		case "revision":
			names[i] = fmt.Sprintf(`greatest(%[1]s.revision, (SELECT max(n.rev) FROM {s}.nodes n
				WHERE n.lane = %[1]s.lane AND n.execution_id = %[1]s.id%[2]s)) AS revision`, alias, pin)
		case "updated_at":
			names[i] = fmt.Sprintf(`greatest(%[1]s.updated_at, (SELECT max(n.changed_at) FROM {s}.nodes n
				WHERE n.lane = %[1]s.lane AND n.execution_id = %[1]s.id%[2]s)) AS updated_at`, alias, pin)
		default:
			names[i] = alias + "." + c
		}
	}
	return s.q(strings.Join(names, ", "))
}

// dbColumns returns the column of each field of T, as its db tag names it.
func dbColumns[T any]() []string {
	t := reflect.TypeFor[T]()
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("db"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// cols writes names as a column list, each qualified by alias unless alias is "".
func cols(alias string, names []string) string {
	if alias == "" {
		return strings.Join(names, ", ")
	}
	return alias + "." + strings.Join(names, ", "+alias+".")
}
