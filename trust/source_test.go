package trust

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
)

func TestHolderCurrent(t *testing.T) {
	a, b := AcceptAll(), &Policy{Default: []Requirement{{Type: TypeReject}}}
	h := NewHolder(a)
	tests := []struct {
		name string
		src  Source
		set  *Policy
		want *Policy
	}{
		{"a policy is its own source", b, nil, b},
		{"a holder returns what it holds", h, nil, a},
		{"a holder returns what was set", h, b, b},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.set != nil {
				h.Set(tc.set)
			}
			if got := tc.src.Current(); got != tc.want {
				t.Fatalf("Current() = %p, want %p", got, tc.want)
			}
		})
	}
}

func TestReadPolicyDigest(t *testing.T) {
	dir := t.TempDir()
	good, bad := []byte(`{"default": [{"type": "reject"}]}`), []byte(`{"default": [`)
	if err := os.WriteFile(filepath.Join(dir, "good.json"), good, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.json"), bad, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		path    string
		want    digest.Digest
		wantErr bool
	}{
		{"no path", "", "", false},
		{"a file", filepath.Join(dir, "good.json"), digest.FromBytes(good), false},
		{"a file that fails to parse", filepath.Join(dir, "bad.json"), digest.FromBytes(bad), true},
		{"a missing file", filepath.Join(dir, "none.json"), "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, got, err := ReadPolicy(tc.path)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Fatalf("digest = %q, want %q", got, tc.want)
			}
		})
	}
}
