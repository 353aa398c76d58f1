package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/internal/ioerr"
	"golang.org/x/sys/unix"
)

// fileCheckpoint is a build's append-only record of how far each payload
// file written in order is written, synced and hashed, so that the next
// build of the same identity continues a file an interrupted one left in
// part (artifact.PartResumer). It holds progress records as the progress
// file does (seed.go), and like it never reaches artifacts/.
const fileCheckpoint = ".checkpoint"

// A checkpoint record, [kind recCheckpoint][body length u32 LE][body]:
// [off u64 LE][size u64 LE][state length u16 LE][state][path]. The file's
// bytes [0, off) were synced before it was written, and state is the
// hasher's state at off (artifact.FileHasher.State); off == size with no
// state says the file was written whole and synced. The latest record of
// a path wins.
const recCheckpoint = 'C'

// maxCheckpointRecord bounds a checkpoint record's body: the fixed fields,
// a state and a path of at most maxPathLen bytes.
const (
	maxPathLen          = 4096
	maxCheckpointRecord = 18 + artifact.MaxStateLen + maxPathLen
)

// checkpointEvery is how many bytes of a file are written between two
// checkpoints; an interrupted build that stops cleanly records one as it
// stops, so this bounds only what a killed process or a power cut loses.
const checkpointEvery = 64 << 20

// checkpoint is one file's kept prefix.
type checkpoint struct {
	off, size int64
	state     []byte
}

// checkpointBody is a checkpoint record's body.
func checkpointBody(path string, off, size int64, state []byte) []byte {
	body := binary.LittleEndian.AppendUint64(nil, uint64(off))
	body = binary.LittleEndian.AppendUint64(body, uint64(size))
	body = binary.LittleEndian.AppendUint16(body, uint16(len(state)))
	return append(append(body, state...), path...)
}

// readCheckpoints parses a checkpoint file as it streams, keeping the
// latest record of each path. Every length is compared, as an unsigned
// number, with its bound before it is converted or allocated. A record
// cut short at the end (the process died while appending it) ends the
// records; any other malformed record is an errdefs.ErrDataLoss, returned
// with the records before it.
func readCheckpoints(r io.Reader) (map[string]checkpoint, error) {
	out := map[string]checkpoint{}
	br := bufio.NewReader(r)
	for at := int64(0); ; {
		var hdr [recHeader]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return out, nil
			}
			return out, err
		}
		size := binary.LittleEndian.Uint32(hdr[1:])
		if hdr[0] != recCheckpoint || size < 19 || size > maxCheckpointRecord {
			return out, fmt.Errorf("checkpoint record %q of %d bytes at %d: %w", hdr[0], size, at, errdefs.ErrDataLoss)
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(br, body); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return out, nil
			}
			return out, err
		}
		path, c, err := parseCheckpoint(body)
		if err != nil {
			return out, fmt.Errorf("checkpoint record at %d: %w", at, err)
		}
		out[path] = c
		at += recHeader + int64(size)
	}
}

// parseCheckpoint parses a checkpoint record's body, of at least 19 bytes.
func parseCheckpoint(body []byte) (string, checkpoint, error) {
	off, size := binary.LittleEndian.Uint64(body), binary.LittleEndian.Uint64(body[8:])
	n := uint64(binary.LittleEndian.Uint16(body[16:]))
	switch {
	case size > math.MaxInt64 || off > size:
		return "", checkpoint{}, fmt.Errorf("offset %d of a file of %d bytes: %w", off, size, errdefs.ErrDataLoss)
	case n > artifact.MaxStateLen || 18+n >= uint64(len(body)):
		return "", checkpoint{}, fmt.Errorf("a state of %d bytes in a record of %d: %w", n, len(body), errdefs.ErrDataLoss)
	case (n == 0) != (off == size):
		return "", checkpoint{}, fmt.Errorf("a state of %d bytes at %d of %d bytes (one part way, none at the end): %w", n, off, size, errdefs.ErrDataLoss)
	}
	path := string(body[18+n:])
	if err := artifact.ValidateRelPath(path); err != nil || isReservedPath(path) {
		return "", checkpoint{}, fmt.Errorf("payload path %q: %w", path, errdefs.ErrDataLoss)
	}
	c := checkpoint{off: int64(off), size: int64(size)}
	if n > 0 {
		c.state = append([]byte(nil), body[18:18+n]...)
	}
	return path, c, nil
}

// keep records that the file at path is synced, and hashed with state,
// up to off. The caller synced the file's bytes [0, off) first.
func (b *build) keep(path string, off, size int64, state []byte) error {
	if len(path) > maxPathLen || len(state) > artifact.MaxStateLen {
		return fmt.Errorf("checkpoint %q: path or state too long: %w", path, errdefs.ErrInvalidArgument)
	}
	b.ckMu.Lock()
	defer b.ckMu.Unlock()
	if b.ckFile == nil {
		f, err := os.OpenFile(filepath.Join(b.dir, fileCheckpoint), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", path, ioerr.Classify(err, noSpace))
		}
		b.ckFile = f
	}
	return appendRecord(b.ckFile, recCheckpoint, checkpointBody(path, off, size, state))
}

// closeCheckpoints closes the checkpoint file and, when the build is to be
// published, removes it.
func (b *build) closeCheckpoints(remove bool) error {
	b.ckMu.Lock()
	defer b.ckMu.Unlock()
	if b.ckFile != nil {
		b.ckFile.Close()
		b.ckFile = nil
	}
	if !remove {
		return nil
	}
	if err := os.Remove(filepath.Join(b.dir, fileCheckpoint)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// keptCheckpoints are the records of the interrupted build this build
// adopted, read once. A malformed record ends them: the files it and
// later records name are not continued.
func (b *build) keptCheckpoints() map[string]checkpoint {
	b.keptOnce.Do(func() {
		f, err := os.Open(filepath.Join(b.dir, dirResume, fileCheckpoint))
		if err != nil {
			return
		}
		defer f.Close()
		b.kept, _ = readCheckpoints(f)
	})
	return b.kept
}

// syncData syncs a file's data, for a checkpoint.
func syncData(f *os.File) error {
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("sync %s: %w", f.Name(), ioerr.Classify(err, noSpace))
	}
	return nil
}
