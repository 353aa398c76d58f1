package peer

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/producers"
	"github.com/weightsnap/weightsnap/peer/internal/wire"
	"golang.org/x/sys/unix"
)

// subsetPlan is a fetch of the tensors matching patterns: each safetensors
// shard with a match becomes a file of its own with only those tensors.
type subsetPlan struct {
	files []subsetFile
}

// subsetFile is one file of a subset.
type subsetFile struct {
	shard   int
	header  []byte                 // the new file's header region; nil: the shard as it is
	tensors []artifact.TensorEntry // the source records of the matched tensors
}

// checkPatterns refuses a tensor pattern path.Match cannot use.
func checkPatterns(patterns []string) error {
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return badInput("tensor pattern %q is not a path.Match pattern", p)
		}
	}
	return nil
}

// planSubset plans the subset of m matching patterns (checked) and returns
// its identity.
func planSubset(m *wire.WeightManifest, patterns []string) (*subsetPlan, artifact.Identity, error) {
	match := func(name string) bool {
		for _, p := range patterns {
			if ok, _ := path.Match(p, name); ok {
				return true
			}
		}
		return false
	}
	plan := &subsetPlan{}
	matched := 0
	for i, s := range m.Shards {
		if !artifact.IsSafetensors(s.Path) {
			plan.files = append(plan.files, subsetFile{shard: i})
			continue
		}
		sf := subsetFile{shard: i}
		var infos []artifact.TensorInfo
		var at int64
		for _, t := range s.Tensors {
			if match(t.Name) {
				sf.tensors = append(sf.tensors, t)
				infos = append(infos, artifact.TensorInfo{Name: t.Name, DType: t.DType, Shape: t.Shape, Begin: at, End: at + t.Length})
				at += t.Length
			}
		}
		if len(sf.tensors) == 0 {
			continue
		}
		// The manifest's validation bound the header bytes to its BLAKE3.
		src, err := artifact.ReadHeader(bytes.NewReader(s.Header), s.Size)
		if err != nil {
			return nil, artifact.Identity{}, wire.Errorf("manifest", "the header of %s: %v", s.Path, err)
		}
		hdr, err := artifact.EncodeHeader(infos, src.Metadata)
		if err != nil {
			return nil, artifact.Identity{}, fmt.Errorf("subset of %s: %w", s.Path, err)
		}
		sf.header = hdr
		matched += len(sf.tensors)
		plan.files = append(plan.files, sf)
	}
	if matched == 0 {
		return nil, artifact.Identity{}, badInput("no tensor of %s matches %q", m.ID.Short(), patterns)
	}
	id, err := producers.SubsetIdentity(m.Identity, patterns)
	return plan, id, err
}

// prepare creates the subset's targets: each new file a scratch file
// holding its header, its units the matched tensors at their new offsets;
// every other file bound as the sender holds it.
func (p *subsetPlan) prepare(f *fetcher) error {
	for _, sf := range p.files {
		s := f.base.Shards[sf.shard]
		if sf.header == nil {
			t, err := f.createBound(artifact.Binding{Want: s.FileEntry, By: artifact.BindTree})
			if err != nil {
				return err
			}
			if err := f.addUnits(t, shardUnits(sf.shard, s, t)); err != nil {
				return err
			}
			continue
		}
		start := int64(len(sf.header))
		t := &target{path: s.Path, want: artifact.FileEntry{File: artifact.File{Path: s.Path}, DataStart: start,
			HeaderBLAKE3: artifact.BLAKE3Hex(sf.header)}}
		var us []*unit
		at := start
		for _, x := range sf.tensors {
			d, _ := artifact.ParseSum(x.BLAKE3)
			moved := x
			moved.Offset = at
			t.want.Tensors = append(t.want.Tensors, moved)
			us = append(us, &unit{shard: sf.shard, off: x.Offset, n: x.Length, dst: t, dstOff: at, part: -1, name: x.Name, blake3: d})
			at += x.Length
		}
		t.want.Size = at
		f.targets = append(f.targets, t)
		if err := f.openScratch(t, sf.header); err != nil {
			return err
		}
		if err := f.addUnits(t, us); err != nil {
			return err
		}
	}
	return nil
}

// openScratch gives a subset file an unlinked scratch file on the store's
// filesystem, sized and holding its header, mapped for the rma plane.
func (f *fetcher) openScratch(t *target, header []byte) error {
	if f.scratch == "" {
		return fmt.Errorf("no scratch directory for a tensor subset: %w", errdefs.ErrNotImplemented)
	}
	fd, err := unix.Open(f.scratch, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("scratch file for %s: %w", t.path, err)
	}
	t.scratch = os.NewFile(uintptr(fd), t.path)
	t.out = t.scratch
	if err := t.scratch.Truncate(t.want.Size); err != nil {
		return err
	}
	if _, err := t.scratch.WriteAt(header, 0); err != nil {
		return err
	}
	if f.o.Mode == ModeRMA && t.want.Size > 0 {
		if t.mapping, err = unix.Mmap(fd, 0, int(t.want.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
			return fmt.Errorf("map the scratch file of %s: %w", t.path, err)
		}
	}
	return nil
}

func unmapScratch(t *target) {
	if t.mapping != nil {
		unix.Munmap(t.mapping)
		t.mapping = nil
	}
}

// copySubset copies a subset file, all its units verified, in order into a
// new file of the store, which hashes it as it is written; what the store
// computed must be the planned header and tensors.
func (f *fetcher) copySubset(t *target) error {
	fw, err := f.w.Create(t.path, t.want.Size)
	if err != nil {
		return err
	}
	buf := make([]byte, 4<<20)
	if _, err := io.CopyBuffer(fw, io.NewSectionReader(t.scratch, 0, t.want.Size), buf); err != nil {
		fw.Close()
		return fmt.Errorf("copy %s: %w", t.path, err)
	}
	if err := fw.Close(); err != nil {
		return err
	}
	got, err := fw.Entry()
	if err != nil {
		return err
	}
	want := t.want
	want.SHA256, want.BLAKE3 = got.SHA256, got.BLAKE3 // the store's to compute for a new file
	return artifact.CompareEntry(want, got)
}
