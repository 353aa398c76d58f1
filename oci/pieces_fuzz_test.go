package oci

import (
	"bytes"
	"testing"

	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/blake3"
)

// fuzzUnits are units of three and two pieces, and the pieces layer that
// checks against them.
func fuzzUnits() ([]pieceUnit, []byte) {
	us := []pieceUnit{
		{path: "a.safetensors", tensor: "w", off: 64, n: 2*blake3.PieceSize + 5},
		{path: "b.bin", n: blake3.PieceSize + 1},
	}
	var layer []byte
	for k := range us {
		cvs := make([][32]byte, blake3.Pieces(us[k].n))
		for i := range cvs {
			cvs[i][0], cvs[i][1] = byte(k), byte(i)
			layer = append(layer, cvs[i][:]...)
		}
		us[k].blake3 = artifact.SumHex(blake3.RootFromCVs(cvs))
	}
	return us, layer
}

// FuzzReadPieces fuzzes the pieces layer's reader on fixed units: the
// layer's bytes read whole and in pieces cut at random points. The verdict
// never depends on the cuts, and a layer is accepted only as the one whose
// values merge into each unit's BLAKE3.
func FuzzReadPieces(f *testing.F) {
	us, good := fuzzUnits()
	f.Add(good, []byte{31, 0, 200})
	f.Add(good[:len(good)-1], []byte{7})
	f.Add(append(bytes.Clone(good), 0), []byte{})
	flipped := bytes.Clone(good)
	flipped[100] ^= 0x80
	f.Add(flipped, []byte{3, 64})
	f.Fuzz(func(t *testing.T, layer []byte, cuts []byte) {
		whole, werr := readPieces(bytes.NewReader(layer), us)
		cut, cerr := readPieces(&cutReader{b: layer, cuts: cuts}, us)
		if (werr == nil) != (cerr == nil) || (werr != nil && werr.Error() != cerr.Error()) {
			t.Fatalf("cuts %v changed the verdict: %v, then %v", cuts, werr, cerr)
		}
		if werr != nil {
			return
		}
		if !bytes.Equal(layer, good) {
			t.Fatalf("accepted a layer other than the one of the units")
		}
		for k, u := range whole {
			if got := blake3.RootFromCVs(u.cvs); artifact.SumHex(got) != us[k].blake3 || len(cut[k].cvs) != len(u.cvs) {
				t.Fatalf("unit %d accepted with values that do not merge into its BLAKE3", k)
			}
		}
	})
}
