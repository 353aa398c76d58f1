// Command child runs one store operation for the crash and power-cut
// harnesses. It is built with the "faults" tag, so WEIGHTSNAP_FAULT can kill
// or pause it at a named step (and, with the "powercut" tag, it may open a
// store on the power-cut test filesystem). It prints one line: "ok <detail>"
// or "error <type> <message>".
//
//	child build|import|deny|rebuild|remove|evict|gc|lookup|lookup-metadata ROOT SRC
//	child check ROOT SRC ready|denied|gone|any|any-corrupted
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/fingerprint"
	"github.com/weightsnap/weightsnap/evict"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/store"
)

func main() {
	if len(os.Args) != 4 && !(len(os.Args) == 5 && os.Args[1] == "check") {
		fmt.Fprintln(os.Stderr, "usage: child OP ROOT SRC, or child check ROOT SRC EXPECT")
		os.Exit(2)
	}
	op, root, srcDir := os.Args[1], os.Args[2], os.Args[3]
	ctx := context.Background()
	var detail string
	var err error
	if op == "check" {
		detail, err = check(ctx, root, srcDir, os.Args[4])
	} else {
		detail, err = run(ctx, op, root, srcDir)
	}
	if err != nil {
		fmt.Printf("error %T %v\n", err, err)
		os.Exit(1)
	}
	fmt.Println("ok", detail)
}

func run(ctx context.Context, op, root, srcDir string) (string, error) {
	d, err := store.Open(ctx, root, nil)
	if err != nil {
		return "", err
	}
	// Builds make the room they lack as the CLI's do.
	ev, err := evict.New(d)
	if err != nil {
		return "", err
	}
	d.SetRoomMaker(ev)
	src, _, err := artifact.ScanSource(ctx, srcDir)
	if err != nil {
		return "", err
	}
	identity := storetest.Identity(src)
	id, _ := identity.ID()
	switch op {
	case "build", "rebuild":
		l, _, err := d.GetOrBuild(ctx, identity, &artifact.Passthrough{Src: src})
		if err != nil {
			return "", err
		}
		return l.ID.Hex(), l.Close()
	case "import":
		return importSource(ctx, d, srcDir)
	case "deny", "lookup":
		l, err := d.Lookup(ctx, id, store.FullChecksum)
		if err != nil {
			return "", err
		}
		return "lease " + l.ID.Hex(), l.Close()
	case "lookup-metadata":
		l, err := d.Lookup(ctx, id, store.ManifestAndMetadata)
		if err != nil {
			return "", err
		}
		return "lease " + l.ID.Hex(), l.Close()
	case "remove":
		return id.Hex(), d.Remove(ctx, id)
	case "evict":
		r, err := ev.To(ctx, 0, false)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("evicted %d, %d bytes", len(r.Evicted), r.Freed), nil
	case "gc":
		// Every kind of garbage, the interrupted builds however young.
		r, err := d.GC(ctx, store.GCOptions{All: true})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("gc %+v", *r), nil
	}
	return "", fmt.Errorf("unknown op %q", op)
}

// importSource imports a checkpoint as `weightsnap import` does on a cold
// cache: one pass that copies and fingerprints, then the cache records.
func importSource(ctx context.Context, d *store.Domain, srcDir string) (string, error) {
	cache := fingerprint.New(filepath.Join(d.Root(), fingerprint.DirName))
	fp, err := cache.Lookup(ctx, srcDir)
	if err != nil {
		return "", err
	}
	started := time.Now().UnixNano()
	l, _, err := d.Import(ctx, &artifact.Passthrough{Src: fp.Src}, func(files []artifact.FileEntry) (artifact.Identity, error) {
		full, err := fp.Src.WithDigests(files)
		if err != nil {
			return artifact.Identity{}, err
		}
		return storetest.Identity(full), nil
	})
	if err != nil {
		return "", err
	}
	defer l.Close()
	cache.Record(ctx, fp, l.Index.Files, started)
	return l.ID.Hex(), nil
}
