package persistence

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/persistence/machine"
)

// machine.JSONEqual follows PostgreSQL's jsonb equality, checked against PostgreSQL itself on pairs that
// spell the same value differently and pairs that differ slightly.
func TestJSONEqualIsJsonbEquality(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pairs := [][2]string{
		{`1`, `1.0`}, {`1`, `1e0`}, {`100`, `1e2`}, {`0.1`, `1e-1`}, {`-0`, `0`}, {`1`, `2`}, {`1.00000000000000000001`, `1`},
		{`"a"`, `"\u0061"`}, {`"é"`, `"\u00e9"`}, {`"a"`, `"A"`}, {`"\/"`, `"/"`}, {`""`, `null`},
		{`{"a":1,"b":2}`, `{"b":2,"a":1}`}, {`{"a":1}`, `{"a":1,"a":1}`}, {`{"a":1,"a":2}`, `{"a":2}`}, {`{"a":1}`, `{"a":1,"b":null}`},
		{`[1,2]`, `[2,1]`}, {`[]`, `{}`}, {`[1.0,{"x":[true]}]`, `[1,{"x":[true]}]`}, {`true`, `"true"`}, {`null`, `null`},
		{` {"a" : [ 1 , 2 ] } `, `{"a":[1,2]}`}, {`12345678901234567890`, `12345678901234567890.0`}, {`1e400`, `1e400`},
	}
	for i := range 200 { // generated: numbers written in several ways, keys in several orders
		n := float64(i*37%1000) / 8
		pairs = append(pairs, [2]string{
			fmt.Sprintf(`{"n":%g,"k%d":[%d,"s"]}`, n, i%7, i),
			fmt.Sprintf(`{"k%d":[%d.0,"s"],"n":%s}`, (i+i/50)%7, i, strings.TrimSuffix(fmt.Sprintf("%.6f", n), "0")),
		})
	}
	ctx := context.Background()
	for _, p := range pairs {
		var want bool
		require.NoError(t, b.db.NewRaw("SELECT ?::jsonb = ?::jsonb", p[0], p[1]).Scan(ctx, &want), "%s, %s", p[0], p[1])
		require.Equal(t, want, machine.JSONEqual([]byte(p[0]), []byte(p[1])), "%s = %s", p[0], p[1])
	}
}
