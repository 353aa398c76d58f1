package node

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"

	"github.com/containerd/log"
	"github.com/weightsnap/weightsnap/cmd/internal/config"
	"github.com/weightsnap/weightsnap/store"
)

// startFields are the start log's fields: the configuration file, the
// policy files with the sha256 of their bytes, and the store policy in
// force. trustDigest is the digest of the trust policy the daemon applies,
// "" when no file is read.
func startFields(cfg config.Config, d *store.Domain, trustDigest string) log.Fields {
	p := d.Policy()
	f := log.Fields{
		"config": "none (defaults)", "trust_policy": "none (artifacts accepted unverified)",
		"domain_policy": filepath.Join(d.Root(), "domain-policy.json"),
		"validation":    p.Validation, "max_artifact_bytes": p.MaxArtifactBytes, "max_store_bytes": p.MaxStoreBytes,
		"min_free_bytes": p.MinFreeBytes, "eviction": p.Eviction,
		"high_watermark_percent": p.HighWatermarkPercent, "low_watermark_percent": p.LowWatermarkPercent,
	}
	f["domain_policy_digest"] = fileDigest(f["domain_policy"].(string))
	if cfg.Path != "" {
		f["config"], f["config_digest"] = cfg.Path, fileDigest(cfg.Path)
	}
	if trustDigest != "" {
		f["trust_policy"], f["trust_policy_digest"] = cfg.Verify.Policy, trustDigest
	}
	return f
}

// fileDigest is "sha256:<hex>" of the file's bytes, or why it cannot be read.
func fileDigest(path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}
