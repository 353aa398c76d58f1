package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

// check opens the store at root after a power cut and checks the invariant:
// every artifact is READY and valid by full checksum, or denied (or found
// invalid now), or gone; nothing READY is partial; a second build of the
// source's identity succeeds and leaves no temp entry; after it and gc,
// only READY valid artifacts remain and inspect --domain accounts every
// byte under the root. expect is what the
// source's artifact must be: ready, denied or gone once the operation
// returned, any before; any-corrupted also lets it pass the metadata checks
// with the corruption the test put there, which only a full checksum finds.
func check(ctx context.Context, root, srcDir, expect string) (string, error) {
	d, err := store.Open(ctx, root, nil)
	if err != nil {
		return "", fmt.Errorf("reopen: %w", err)
	}
	src, _, err := artifact.ScanSource(ctx, srcDir)
	if err != nil {
		return "", err
	}
	identity := storetest.Identity(src)
	id, _ := identity.ID()
	entries, err := os.ReadDir(filepath.Join(root, "artifacts"))
	if err != nil {
		return "", err
	}
	var problems []error
	state := "gone"
	for _, e := range entries {
		s, err := entryState(ctx, d, e.Name(), srcDir, e.Name() == id.Hex())
		if err != nil && !(expect == "any-corrupted" && e.Name() == id.Hex() && s == "corrupt") {
			problems = append(problems, err)
		}
		if e.Name() == id.Hex() {
			state = s
		}
	}
	if expect != "any" && expect != "any-corrupted" && state != expect {
		problems = append(problems, fmt.Errorf("the operation returned, but after the power cut its artifact is %s, want %s", state, expect))
	}
	if err := rebuild(ctx, d, identity, src, root, srcDir); err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return "", errors.Join(problems...)
	}
	return "artifact " + state, nil
}

// entryState looks artifacts/<name> up as the default policy does and, if
// that finds it READY, by full checksum: ready, corrupt (READY by the
// metadata but not by the bytes, with the error), denied or invalid.
func entryState(ctx context.Context, d *store.Domain, name, srcDir string, ours bool) (string, error) {
	id, err := artifact.ParseIDHex(name)
	if err != nil {
		return "unreadable", err
	}
	l, err := d.Lookup(ctx, id, store.ManifestAndMetadata)
	var denied *store.DeniedError
	switch {
	case errors.As(err, &denied):
		return "denied", nil
	case store.IsInvalid(err):
		return "invalid", nil
	case err != nil:
		return "unreadable", fmt.Errorf("lookup of %s: %w", name[:12], err)
	}
	l.Close()
	full, err := d.Lookup(ctx, id, store.FullChecksum)
	if err != nil {
		return "corrupt", fmt.Errorf("%s is READY but not valid by full checksum: %w", name[:12], err)
	}
	defer full.Close()
	if ours {
		if err := storetest.SameBytes(full, srcDir); err != nil {
			return "corrupt", fmt.Errorf("%s is READY with other bytes than its source: %w", name[:12], err)
		}
	}
	return "ready", nil
}

// rebuild checks that a second build of identity succeeds with the source's
// bytes and leaves no temp entry behind.
func rebuild(ctx context.Context, d *store.Domain, identity artifact.Identity, src *artifact.SourceDir, root, srcDir string) error {
	l, _, err := d.GetOrBuild(ctx, identity, &artifact.Passthrough{Src: src})
	if err != nil {
		return fmt.Errorf("second build: %w", err)
	}
	err = storetest.SameBytes(l, srcDir)
	l.Close()
	if err != nil {
		return fmt.Errorf("second build: %w", err)
	}
	if full, err := d.Lookup(ctx, l.ID, store.FullChecksum); err != nil {
		return fmt.Errorf("second build not valid by full checksum: %w", err)
	} else {
		full.Close()
	}
	// Only an interrupted build of another artifact may stay, kept for that
	// artifact's next build ([store] stale_build_seconds): gc says which
	// (it is asked after the entries are listed, so it hides nothing).
	tmp, _ := os.ReadDir(filepath.Join(root, "tmp"))
	r, err := d.GC(ctx, store.GCOptions{})
	if err != nil {
		return fmt.Errorf("gc after the second build: %w", err)
	}
	kept := map[string]bool{}
	for _, k := range r.Kept {
		if k.ID != l.ID {
			kept[k.Name] = true
		}
	}
	var names []string
	for _, e := range tmp {
		if !kept[e.Name()] {
			names = append(names, e.Name())
		}
	}
	if len(names) > 0 {
		return fmt.Errorf("temp entries survive the second build: %s", strings.Join(names, ", "))
	}
	return settled(ctx, d, root, srcDir)
}

// settled checks the store after the second build and gc: every artifact
// is READY and valid by full checksum, and inspect --domain accounts every
// byte under the root.
func settled(ctx context.Context, d *store.Domain, root, srcDir string) error {
	entries, err := os.ReadDir(filepath.Join(root, "artifacts"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if s, err := entryState(ctx, d, e.Name(), srcDir, false); s != "ready" {
			return fmt.Errorf("after gc artifacts/%s is %s, want ready: %v", e.Name(), s, err)
		}
	}
	return storetest.CheckSettled(ctx, d)
}
