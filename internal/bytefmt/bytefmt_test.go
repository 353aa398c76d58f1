package bytefmt

import "testing"

func TestIEC(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"},
		{64<<20 + 100<<10, "64.1 MiB"}, {1 << 30, "1.0 GiB"}, {5 << 50, "5.0 PiB"}, {1 << 62, "4.0 EiB"},
	} {
		if got := IEC(c.n); got != c.want {
			t.Errorf("IEC(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
