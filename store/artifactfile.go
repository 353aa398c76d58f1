package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"golang.org/x/sys/unix"
)

// editArtifactFile rewrites the file that keeps one artifact's pins or
// trust records, under locks/<kind>.lock. next reads the file and returns its
// new bytes; nil removes it. The file is replaced atomically and durably:
// a crash leaves the old bytes or the new ones.
func (d *Domain) editArtifactFile(ctx context.Context, kind, p string, next func() ([]byte, error)) error {
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Base(dir), err)
	}
	lk, err := lockFile(ctx, d.path(dirLocks, kind+".lock"), unix.LOCK_EX, time.Now().Add(d.policy.CoordinationTimeout()), "the "+kind+" lock")
	if err != nil {
		return err
	}
	defer lk.Close()
	raw, err := next()
	if err != nil {
		return err
	}
	if raw != nil {
		return artifact.WriteFileAtomic(p, raw, 0o644, artifact.Durable)
	}
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return syncDir(dir)
}
