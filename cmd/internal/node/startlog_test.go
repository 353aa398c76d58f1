package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/store"
)

// TestStartFields: the start log names the configuration file and the
// policy files with the sha256 of their bytes, and the store policy in
// force; without a file it says the defaults hold.
func TestStartFields(t *testing.T) {
	dir := t.TempDir()
	policy := store.DefaultPolicy()
	policy.MaxStoreBytes, policy.HighWatermarkPercent, policy.LowWatermarkPercent = 300<<20, 90, 70
	d, err := store.Open(context.Background(), filepath.Join(dir, "root"), &policy)
	if err != nil {
		t.Fatal(err)
	}
	cfgFile, trustFile := filepath.Join(dir, "config.toml"), filepath.Join(dir, "policy.json")
	for _, f := range []string{cfgFile, trustFile} {
		if err := os.WriteFile(f, []byte("contents of "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum := func(path string) string {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := sha256.Sum256(raw)
		return "sha256:" + hex.EncodeToString(s[:])
	}
	domainPolicy := filepath.Join(d.Root(), "domain-policy.json")
	inForce := map[string]string{"max_store_bytes": fmt.Sprint(300 << 20), "high_watermark_percent": "90", "low_watermark_percent": "70",
		"eviction": "lru", "domain_policy": domainPolicy, "domain_policy_digest": sum(domainPolicy)}
	for _, tc := range []struct {
		name        string
		cfg         config.Config
		trustDigest string
		want        map[string]string
	}{
		{name: "files", cfg: config.Config{Path: cfgFile, Verify: config.Verify{Policy: trustFile}}, trustDigest: sum(trustFile),
			want: map[string]string{"config": cfgFile, "config_digest": sum(cfgFile), "trust_policy": trustFile, "trust_policy_digest": sum(trustFile)}},
		{name: "defaults", cfg: config.Config{}, want: map[string]string{"config": "none (defaults)", "trust_policy": "none (artifacts accepted unverified)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := startFields(tc.cfg, d, tc.trustDigest)
			for k, v := range inForce {
				tc.want[k] = v
			}
			for k, v := range tc.want {
				if fmt.Sprint(got[k]) != v {
					t.Errorf("%s = %v, want %s", k, got[k], v)
				}
			}
		})
	}
}
