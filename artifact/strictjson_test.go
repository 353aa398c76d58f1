package artifact

import (
	"strings"
	"testing"
)

func TestDecodeStrictJSON(t *testing.T) {
	type doc struct {
		A int `json:"a"`
	}
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{`{"a":1}`, 1, true},
		{" {\"a\":2}\n ", 2, true},
		{`{"a":1,"b":2}`, 0, false},  // unknown field
		{`{"a":1}{"a":2}`, 0, false}, // a second value
		{`{"a":1} x`, 0, false},      // trailing garbage
		{`{"a":`, 0, false},          // truncated
		{``, 0, false},
	} {
		var d doc
		err := DecodeStrictJSON(strings.NewReader(tc.in), &d)
		if (err == nil) != tc.ok || (tc.ok && d.A != tc.want) {
			t.Errorf("%q: got %+v, %v; want a=%d ok=%v", tc.in, d, err, tc.want, tc.ok)
		}
	}
}
