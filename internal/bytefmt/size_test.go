package bytefmt

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/containerd/errdefs"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64 // -1: refused
	}{
		{"4096", 4096}, {"1KiB", 1 << 10}, {"1.5GiB", 3 << 29}, {"100M", 100 << 20}, {"2GB", 2e9}, {" 300MiB ", 300 << 20},
		{"NaN", -1}, {"Inf", -1}, {"-Inf", -1}, {"InfGiB", -1}, {"-1", -1}, {"1e30GiB", -1},
		{"8TiB", 8 << 40}, {"9223372036854775807", -1}, {"8388608TiB", -1}, {"", -1}, {"GiB", -1},
	} {
		got, err := Parse(tc.in)
		if tc.want < 0 {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Parse(%q) = %d, %v; want an invalid-argument error", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestSizeJSON(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Size // -1: refused
	}{
		{`300`, 300}, {`"300MiB"`, 300 << 20}, {`"1GiB"`, 1 << 30}, {`0`, 0},
		{`-1`, -1}, {`"lots"`, -1}, {`true`, -1}, {`1.5`, -1},
	} {
		var got Size
		err := json.Unmarshal([]byte(tc.in), &got)
		if tc.want < 0 {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("unmarshal %s = %d, %v; want an invalid-argument error", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("unmarshal %s = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	raw, err := json.Marshal(struct{ S Size }{300 << 20})
	if err != nil || string(raw) != `{"S":314572800}` {
		t.Errorf("marshal = %s, %v; want an integer", raw, err)
	}
}

func TestSizeString(t *testing.T) {
	for _, tc := range []struct {
		in   Size
		want string
	}{
		{0, "0"}, {1000, "1000"}, {1 << 10, "1KiB"}, {300 << 20, "300MiB"}, {3 << 29, "1536MiB"}, {2 << 40, "2TiB"}, {1<<20 + 1, "1048577"},
	} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("Size(%d).String() = %q, want %q", tc.in, got, tc.want)
		}
		var back Size
		if err := back.Set(tc.in.String()); err != nil || back != tc.in {
			t.Errorf("Set(%q) = %d, %v; want %d", tc.in.String(), back, err, tc.in)
		}
	}
}
