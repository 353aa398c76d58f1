// Package storetest is what tests of the store and of its users share:
// synthetic checkpoints, a store of the test's own, an artifact seeded in
// it, the revision and identity tests give a checkpoint, an in-memory
// artifact.Writer, a producer that writes as a peer fetch does
// (TreeFetch), waiting out the fingerprint cache's racy window, and the
// store's fault harnesses' helpers (test/crash, test/powercut).
//
// It imports the store, so the store's own in-package tests (package store)
// cannot use it; its external tests (package store_test) can.
package storetest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/store"
)

// Revision is the model revision tests give a checkpoint.
const Revision = "0123456789abcdef0123456789abcdef01234567"

// Repository is the model repository tests give a checkpoint.
const Repository = "org/model"

// Synth writes a synthetic checkpoint of opts into a temporary directory
// and returns it.
func Synth(tb testing.TB, opts synth.Options) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "ckpt")
	if err := synth.Write(context.Background(), dir, opts); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// Checkpoint writes a synthetic BF16 checkpoint of about size bytes in
// shards and returns its directory and scan. It is the same for every call
// with the same size and shards.
func Checkpoint(tb testing.TB, size int64, shards int) (string, *artifact.SourceDir) {
	tb.Helper()
	return CheckpointOf(tb, synth.Options{Size: size, Shards: shards, DType: "BF16", Seed: 7})
}

// CheckpointOf writes a synthetic checkpoint of opts and returns its
// directory and scan.
func CheckpointOf(tb testing.TB, opts synth.Options) (string, *artifact.SourceDir) {
	tb.Helper()
	dir := Synth(tb, opts)
	src, _, err := artifact.ScanSource(context.Background(), dir)
	if err != nil {
		tb.Fatal(err)
	}
	return dir, src
}

// Open opens a new store in a temporary directory.
func Open(tb testing.TB) *store.Domain {
	tb.Helper()
	return OpenAt(tb, filepath.Join(tb.TempDir(), "store"))
}

// OpenAt opens the store at root, creating it if needed.
func OpenAt(tb testing.TB, root string) *store.Domain {
	tb.Helper()
	d, err := store.Open(context.Background(), root, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// Identity is the passthrough identity tests give the checkpoint src:
// Repository at Revision.
func Identity(src *artifact.SourceDir) artifact.Identity {
	return artifact.PassthroughIdentity(src, Repository, Revision, "", 0, 0)
}

// Seed publishes src in d as its passthrough artifact (see Identity) and
// returns the identity; no lease is left held.
func Seed(tb testing.TB, d *store.Domain, src *artifact.SourceDir) artifact.Identity {
	tb.Helper()
	id := Identity(src)
	l, _, err := d.GetOrBuild(context.Background(), id, &artifact.Passthrough{Src: src})
	if err != nil {
		tb.Fatal(err)
	}
	l.Close()
	return id
}

// Model is a synthetic one-shard BF16 checkpoint of about size bytes, distinct
// for each seed, and its passthrough identity (see Identity).
func Model(tb testing.TB, size int64, seed uint64) (*artifact.SourceDir, artifact.Identity) {
	tb.Helper()
	_, src := CheckpointOf(tb, synth.Options{Size: size, Shards: 1, DType: "BF16", Seed: seed})
	return src, Identity(src)
}

// Build publishes src in d under id and returns its ID, leaving no lease held.
func Build(ctx context.Context, d *store.Domain, src *artifact.SourceDir, id artifact.Identity) (artifact.ID, error) {
	l, _, err := d.GetOrBuild(ctx, id, &artifact.Passthrough{Src: src})
	if err != nil {
		return artifact.ID{}, err
	}
	return l.ID, l.Close()
}

// Seeded is a new store holding the artifact of a synthetic checkpoint of
// about size bytes in shards (see Checkpoint), and its identity.
func Seeded(tb testing.TB, size int64, shards int) (*store.Domain, artifact.Identity) {
	tb.Helper()
	_, src := Checkpoint(tb, size, shards)
	d := Open(tb)
	return d, Seed(tb, d, src)
}

// SettledCheckpoint writes a synthetic checkpoint as Checkpoint does, waits
// out the fingerprint cache's racy window (see Settle), and returns its
// directory: a scan records fingerprints it trusts at once.
func SettledCheckpoint(tb testing.TB, size int64, shards int) string {
	tb.Helper()
	dir := Synth(tb, synth.Options{Size: size, Shards: shards, DType: "BF16", Seed: 7})
	Settle(tb, dir)
	return dir
}
