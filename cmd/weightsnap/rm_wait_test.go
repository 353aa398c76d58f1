package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/cmd/internal/exitcode"
	"github.com/weightsnap/weightsnap/control"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// holdersDaemon is a control backend that answers HoldersOf with a fixed
// report.
type holdersDaemon struct {
	recordingDaemon
	report control.Holders
}

func (h *holdersDaemon) HoldersOf(id artifact.ID) (*control.Holders, error) {
	r := h.report
	r.ID = id
	return &r, nil
}

// TestRmWaitsForTheDaemonsLease: rm waits while the daemon alone holds an
// artifact's lock, whatever the daemon says of its lease at that moment (it
// may be letting it go), and refuses at once what a host mount or a pending
// repair keeps.
func TestRmWaitsForTheDaemonsLease(t *testing.T) {
	tests := []struct {
		name   string
		report control.Holders
		wantOK bool
	}{
		{"snapshots hold the lease", control.Holders{Leased: true, Snapshots: []string{"ctr/1/rootfs"}}, true},
		{"the lease is being let go", control.Holders{}, true},
		{"a host mount holds the lease", control.Holders{Leased: true, Mounts: []string{"/mnt/w"}}, false},
		{"a repair is pending", control.Holders{Pending: []string{"ctr/2/rootfs"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			d, weights := storetest.Seeded(t, 64<<10, 1)
			id, _ := weights.ID()
			sock := filepath.Join(dir, "control.sock")
			srv, err := control.Listen(context.Background(), sock, control.Services{Mounts: &holdersDaemon{report: tt.report}})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			cfg := filepath.Join(dir, "config.toml")
			if err := os.WriteFile(cfg, []byte(fmt.Sprintf("root = %q\n[snapshotter]\ncontrol_address = %q\n", d.Root(), sock)), 0o644); err != nil {
				t.Fatal(err)
			}
			// This process is the daemon: its lease is let go a moment after rm starts.
			l, err := d.Lookup(context.Background(), id, store.ManifestAndMetadata)
			if err != nil {
				t.Fatal(err)
			}
			released := time.AfterFunc(300*time.Millisecond, func() { l.Close() })
			defer func() {
				if released.Stop() {
					l.Close()
				}
			}()
			_, err = runCLI(t, "--config", cfg, "rm", "--wait", "1m", id.Hex())
			if tt.wantOK {
				if err != nil {
					t.Fatalf("rm while the daemon lets the lease go: %v", err)
				}
				return
			}
			if exitcode.Of(err) != 5 || !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "weightsnapd: ") {
				t.Fatalf("rm of an artifact the daemon keeps: %v (exit %d), want exit 5 naming what the daemon holds", err, exitcode.Of(err))
			}
		})
	}
}
