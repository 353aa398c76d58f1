package sim

import (
	"fmt"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
	"github.com/weightsnap/weightsnap/artifact/synth"
)

// Layout is an artifact as the chain moves it: its pieces in order (a tensor longer than
// blake3.PieceSize in pieces of it, a shorter one whole), and where each tensor and file ends.
type Layout struct {
	Bytes     int64
	Pieces    []int64 // each piece's bytes
	TensorEnd []bool  // piece i is the last of its tensor
	FileEnd   []bool  // piece i is the last of its file
	Largest   int64   // the largest tensor's bytes
}

// SynthLayout is the layout of `weightsnap dev synth --size size --shards shards --dtype BF16`:
// its tensors in file order, a file a shard.
func SynthLayout(size int64, shards int) (Layout, error) {
	m, err := synth.Plan(synth.Options{Size: size, Shards: shards, DType: "BF16"})
	if err != nil {
		return Layout{}, err
	}
	dt, _ := artifact.LookupDType("BF16")
	var l Layout
	for _, sh := range m.Shards {
		var sizes []int64
		for _, t := range sh {
			b, ok := dt.TensorBytes(t.Shape)
			if !ok {
				return Layout{}, fmt.Errorf("sim: tensor %s: shape %v overflows", t.Name, t.Shape)
			}
			sizes = append(sizes, b)
		}
		l.addFile(sizes)
	}
	return l, nil
}

// TensorLayout is the layout of one file of tensors of these sizes, in order.
func TensorLayout(sizes []int64) Layout {
	var l Layout
	l.addFile(sizes)
	return l
}

// addFile appends a file of tensors of these sizes, in order.
func (l *Layout) addFile(sizes []int64) {
	for _, n := range sizes {
		l.Bytes += n
		l.Largest = max(l.Largest, n)
		for off := int64(0); off < n; off += blake3.PieceSize {
			l.Pieces = append(l.Pieces, min(n-off, blake3.PieceSize))
			l.TensorEnd = append(l.TensorEnd, off+blake3.PieceSize >= n)
			l.FileEnd = append(l.FileEnd, false)
		}
	}
	if len(l.FileEnd) > 0 {
		l.FileEnd[len(l.FileEnd)-1] = true
	}
}
