package persistence

import (
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

// cols writes names as a column list, each qualified by alias unless alias is "".
func cols(alias string, names []string) string {
	if alias == "" {
		return strings.Join(names, ", ")
	}
	return alias + "." + strings.Join(names, ", "+alias+".")
}
