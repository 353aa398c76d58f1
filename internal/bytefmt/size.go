package bytefmt

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
)

// units are the suffixes Parse reads, longest first within each family.
var units = []struct {
	suffix string
	mult   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1}}

// Parse reads a size such as 1GiB, 512MiB, 100M, 1.5G or 4096.
// A size that is negative, not a number or past the int64 range is
// errdefs.ErrInvalidArgument.
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) || n < 0 {
		return 0, fmt.Errorf("bad size %q: %w", s, errdefs.ErrInvalidArgument)
	}
	v := n * float64(mult)
	if v >= math.MaxInt64 { // float64(MaxInt64) is 2^63: anything from there overflows
		return 0, fmt.Errorf("size %q is more than %d bytes: %w", s, int64(math.MaxInt64), errdefs.ErrInvalidArgument)
	}
	return int64(v), nil
}

// Size is a byte count that a file or a flag writes as an integer or as a
// string with a unit ("300MiB").
// It decodes from TOML and JSON strings and integers, and encodes as an
// integer.
// A *Size is a pflag.Value.
type Size int64

// UnmarshalText reads a TOML or JSON string with Parse.
func (s *Size) UnmarshalText(b []byte) error {
	n, err := Parse(string(b))
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}

// UnmarshalJSON reads a JSON integer or string.
func (s *Size) UnmarshalJSON(b []byte) error {
	var text string
	if err := json.Unmarshal(b, &text); err == nil {
		return s.UnmarshalText([]byte(text))
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("size %s: want an integer or a string such as \"300MiB\": %w", b, errdefs.ErrInvalidArgument)
	}
	if n < 0 {
		return fmt.Errorf("size %d is negative: %w", n, errdefs.ErrInvalidArgument)
	}
	*s = Size(n)
	return nil
}

// String is the size with the largest binary unit that writes it exactly
// ("512MiB", "1000"), which Parse reads back.
func (s Size) String() string {
	for i := 3; i >= 0; i-- {
		if u := units[i]; s != 0 && int64(s)%u.mult == 0 {
			return strconv.FormatInt(int64(s)/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// Set reads a flag's value with Parse.
func (s *Size) Set(v string) error { return s.UnmarshalText([]byte(v)) }

// Type names a size flag's value in usage.
func (s *Size) Type() string { return "size" }
