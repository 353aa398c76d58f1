package tpsplit

import "testing"

// FuzzParseSpec: a spec file never panics the parser, parsing it twice gives
// the same fingerprint, and planning any tensor with it never panics.
func FuzzParseSpec(f *testing.F) {
	f.Add([]byte("name = \"t\"\n[[rule]]\npattern = \"*.q_proj.weight\"\nsplit = \"column\"\n"))
	f.Add([]byte("name = \"t\"\ndefault = \"error\"\n[[rule]]\npattern = \"re:(\"\nsplit = \"row\"\n"))
	f.Add([]byte("name = \"t\"\n[[rule]]\npattern = \"*\"\nsplit = \"column\"\npad_to_multiple = 64\ndim = -1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSpec(data)
		if err != nil {
			return
		}
		again, err := ParseSpec(data)
		if err != nil || again.Fingerprint() != s.Fingerprint() {
			t.Fatalf("a second parse of the same spec: %v, or another fingerprint", err)
		}
		for _, shape := range [][]int64{{}, {7}, {8, 3}, {3, 5, 2}} {
			if p, err := s.Plan("model.layers.0.self_attn.q_proj.weight", "BF16", shape, 4); err == nil {
				for r := range 4 {
					if p.ShardLen(r) < 0 {
						t.Fatalf("negative shard length for rank %d", r)
					}
				}
			}
		}
	})
}
