package benchrow

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// registry serves one manifest, tagged v1 in the repository r, of layers;
// each blob is served cut to serve[digest] bytes when that is set.
func registry(t *testing.T, layers [][]byte, serve map[digest.Digest]int) string {
	t.Helper()
	blobs := map[string][]byte{}
	m := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: ocispec.DescriptorEmptyJSON}
	m.SchemaVersion = 2
	blobs[ocispec.DescriptorEmptyJSON.Digest.String()] = ocispec.DescriptorEmptyJSON.Data
	for _, l := range layers {
		d := digest.FromBytes(l)
		blobs[d.String()] = l
		m.Layers = append(m.Layers, ocispec.Descriptor{MediaType: "application/octet-stream", Digest: d, Size: int64(len(l))})
	}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v2/r/manifests/v1":
			w.Header().Set("Content-Type", ocispec.MediaTypeImageManifest)
			w.Header().Set("Docker-Content-Digest", digest.FromBytes(raw).String())
			w.Write(raw)
		case strings.HasPrefix(r.URL.Path, "/v2/r/blobs/"):
			d := strings.TrimPrefix(r.URL.Path, "/v2/r/blobs/")
			b, ok := blobs[d]
			if !ok {
				http.NotFound(w, r)
				return
			}
			if n, ok := serve[digest.Digest(d)]; ok {
				b = b[:n]
			}
			w.Write(b)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://") + "/r:v1"
}

func TestReceiveFloor(t *testing.T) {
	a, b, c := make([]byte, 3<<20), []byte("a small layer"), make([]byte, 1<<20)
	for _, tc := range []struct {
		name     string
		layers   [][]byte
		serve    map[digest.Digest]int
		parallel int
		want     int64 // the bytes received; -1: an error
	}{
		{"one at a time", [][]byte{a, b, c}, nil, 1, 4<<20 + int64(len(b))},
		{"two at a time", [][]byte{a, b, c}, nil, 2, 4<<20 + int64(len(b))},
		{"no layers", nil, nil, 2, 0},
		{"a layer cut short", [][]byte{a, c}, map[digest.Digest]int{digest.FromBytes(c): 100}, 2, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReceiveFloor(t.Context(), registry(t, tc.layers, tc.serve), tc.parallel)
			if tc.want < 0 {
				if err == nil {
					t.Fatalf("ReceiveFloor = %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Bytes != tc.want || got.Seconds <= 0 || got.CPU < 0 {
				t.Errorf("ReceiveFloor = %+v, want %d bytes in a positive time", got, tc.want)
			}
		})
	}
}
