// Command child runs one store operation for the crash harness. It is built
// with the "faults" tag, so WEIGHTSNAP_FAULT can kill or pause it at a named
// step. It prints one line: "ok <detail>" or "error <type> <message>".
//
//	child build|deny|rebuild|remove|lookup|lookup-metadata ROOT SRC
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/store"
)

const revision = "0123456789abcdef0123456789abcdef01234567"

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: child OP ROOT SRC")
		os.Exit(2)
	}
	op, root, srcDir := os.Args[1], os.Args[2], os.Args[3]
	ctx := context.Background()
	detail, err := run(ctx, op, root, srcDir)
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
	src, _, err := artifact.ScanSource(ctx, srcDir)
	if err != nil {
		return "", err
	}
	identity := artifact.PassthroughIdentity(src, "crash/test", revision, "", 0, 0)
	id, _ := identity.Hex()
	switch op {
	case "build", "rebuild":
		l, _, err := d.GetOrBuild(ctx, identity, &artifact.Passthrough{Src: src})
		if err != nil {
			return "", err
		}
		return l.ID, l.Close()
	case "deny", "lookup":
		l, err := d.Lookup(ctx, id, store.FullChecksum)
		if err != nil {
			return "", err
		}
		return "lease " + l.ID, l.Close()
	case "lookup-metadata":
		l, err := d.Lookup(ctx, id, store.ManifestAndMetadata)
		if err != nil {
			return "", err
		}
		return "lease " + l.ID, l.Close()
	case "remove":
		return id, d.Remove(ctx, id)
	}
	return "", fmt.Errorf("unknown op %q", op)
}
