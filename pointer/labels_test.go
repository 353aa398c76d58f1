package pointer

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
)

func testLabels() map[string]string {
	p := testPointer()
	return map[string]string{LabelArtifact: p.Artifact, LabelIdentity: p.ID.String(), LabelTarget: p.Target,
		"containerd.io/snapshot.ref": "sha256:" + zeros}
}

func TestParseLabels(t *testing.T) {
	pin := "@sha256:" + strings.Repeat("2", 64)
	for _, tc := range []struct {
		name  string
		edit  func(map[string]string)
		ok    bool   // a weight layer
		label string // the label the error names; "" for no error
	}{
		{"valid", func(map[string]string) {}, true, ""},
		{"valid with next", func(m map[string]string) {
			m[LabelNext] = "sha256:" + strings.Repeat("3", 64) + "=reg.example/a" + pin + ",sha256:" + strings.Repeat("4", 64) + "=reg.example/b" + pin
		}, true, ""},
		{"preferred", func(m map[string]string) { m[LabelMode] = ModePreferred }, true, ""},
		{"mode unknown", func(m map[string]string) { m[LabelMode] = "sometimes" }, true, LabelMode},
		{"mode empty", func(m map[string]string) { m[LabelMode] = "" }, true, LabelMode},
		{"ordinary layer", func(m map[string]string) { clear(m); m["containerd.io/snapshot.ref"] = "x" }, false, ""},
		{"relative target", func(m map[string]string) { m[LabelTarget] = "models/x" }, true, LabelTarget},
		{"dot-dot target", func(m map[string]string) { m[LabelTarget] = "/models/../etc" }, true, LabelTarget},
		{"root target", func(m map[string]string) { m[LabelTarget] = "/" }, true, LabelTarget},
		{"unclean target", func(m map[string]string) { m[LabelTarget] = "/models//x/" }, true, LabelTarget},
		{"tag instead of digest", func(m map[string]string) { m[LabelArtifact] = "127.0.0.1:5000/models/x:v1" }, true, LabelArtifact},
		{"tag and digest", func(m map[string]string) { m[LabelArtifact] = "127.0.0.1:5000/models/x:v1" + pin }, true, LabelArtifact},
		{"no repository", func(m map[string]string) { m[LabelArtifact] = "127.0.0.1:5000" + pin }, true, LabelArtifact},
		{"sha512 pin", func(m map[string]string) {
			m[LabelArtifact] = "127.0.0.1:5000/models/x@sha512:" + strings.Repeat("2", 128)
		}, true, LabelArtifact},
		{"identity not sha256", func(m map[string]string) { m[LabelIdentity] = "blake3:" + strings.Repeat("1", 64) }, true, LabelIdentity},
		{"identity upper case", func(m map[string]string) { m[LabelIdentity] = "sha256:" + strings.Repeat("A", 64) }, true, LabelIdentity},
		{"identity short", func(m map[string]string) { m[LabelIdentity] = "sha256:1111" }, true, LabelIdentity},
		{"missing target", func(m map[string]string) { delete(m, LabelTarget) }, true, LabelTarget},
		{"only an unknown weightsnap label", func(m map[string]string) {
			clear(m)
			m[labelPrefix+"future"] = "x"
		}, true, LabelArtifact},
		{"oversized", func(m map[string]string) { m[LabelTarget] = "/" + strings.Repeat("x", 4000) }, true, labelPrefix + "*"},
		{"next entry without identity", func(m map[string]string) { m[LabelNext] = "reg.example/m" + pin }, true, LabelNext},
		{"next entry by tag", func(m map[string]string) { m[LabelNext] = testIdentity + "=reg.example/m:v1" }, true, LabelNext},
		{"next entry empty", func(m map[string]string) { m[LabelNext] = testIdentity + "=reg.example/m" + pin + "," }, true, LabelNext},
		{"oversized in sum", func(m map[string]string) {
			m[LabelTarget] = "/" + strings.Repeat("x", 2500)
			m[labelPrefix+"note"] = strings.Repeat("y", 1500)
		}, true, labelPrefix + "*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := testLabels()
			tc.edit(m)
			p, ok, err := ParseLabels(m)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if tc.label == "" {
				if err != nil {
					t.Fatal(err)
				}
				if ok && (p.Artifact != testPointer().Artifact || p.ID.String() != testIdentity || p.Target != "/models/llama" || p.Mode != m[LabelMode]) {
					t.Fatalf("pointer %+v", p)
				}
				if next := m[LabelNext]; next != "" && len(p.Next) != strings.Count(next, ",")+1 {
					t.Fatalf("next %q parsed as %+v", next, p.Next)
				}
				return
			}
			// The error names the label, with its value cut to a readable length.
			msg := err.Error()
			rest, named := strings.CutPrefix(msg, "weight layer label "+tc.label+"=")
			value := ""
			if named {
				value, _ = strconv.QuotedPrefix(rest)
			}
			if !errdefs.IsInvalidArgument(err) || !(named || strings.HasPrefix(msg, "weight layer label "+tc.label+":")) || len(value) > 102 {
				t.Fatalf("err %v, want a label error on %s", err, tc.label)
			}
		})
	}
}

// FuzzParseLabels: whatever the labels, an accepted pointer names a
// digest-pinned artifact, a sha256 identity and a target that stays inside
// any directory it is joined to.
func FuzzParseLabels(f *testing.F) {
	p := testPointer()
	f.Add(p.Artifact, testIdentity, p.Target, "")
	f.Add("127.0.0.1:5000/models/x:v1", testIdentity, "/models/../../etc", "x")
	f.Add("localhost/a@sha256:"+zeros, "sha256:"+zeros, "/a/b/c", strings.Repeat("z", 5000))
	f.Add("host/repo@sha256:"+zeros+"/../x", "sha256:"+zeros+"\n", "/w\x00/x", "")
	f.Add(p.Artifact, testIdentity, p.Target, testIdentity+"="+p.Artifact+","+testIdentity+"="+p.Artifact)
	f.Add(p.Artifact, testIdentity, p.Target, testIdentity+"=,=")
	f.Fuzz(func(t *testing.T, art, id, target, extra string) {
		labels := map[string]string{LabelArtifact: art, LabelIdentity: id, LabelTarget: target}
		if extra != "" {
			labels[LabelNext] = extra
		}
		p, ok, err := ParseLabels(labels)
		if !ok {
			t.Fatal("weight labels were taken for an ordinary layer")
		}
		if err != nil {
			return
		}
		for _, q := range append([]Pointer{p}, p.Next...) {
			if q.ID.IsZero() || CheckPinnedRef(q.Artifact) != nil || Host(q) == "" {
				t.Fatalf("accepted %+v", q)
			}
		}
		if j := filepath.Join("/snap/fs", p.Target); !strings.HasPrefix(j, "/snap/fs/") || j != "/snap/fs"+p.Target {
			t.Fatalf("target %q escapes: %q", p.Target, j)
		}
		if len(art)+len(id)+len(target)+len(extra) > MaxLabelsBytes {
			t.Fatalf("accepted %d bytes of labels", len(art)+len(id)+len(target)+len(extra))
		}
	})
}

func TestParseFile(t *testing.T) {
	good, err := File(testPointer())
	if err != nil {
		t.Fatal(err)
	}
	preferred := testPointer()
	preferred.Mode = ModePreferred
	withMode, _ := File(preferred)
	for _, tc := range []struct {
		name string
		raw  string
		ok   bool
	}{
		{"good", string(good), true},
		{"with a mode", string(withMode), true},
		{"unknown field", strings.Replace(string(good), `{"artifact"`, `{"extra":1,"artifact"`, 1), false},
		{"two documents", string(good) + string(good), false},
		{"schema 2", strings.Replace(string(good), `"schema":1`, `"schema":2`, 1), false},
		{"relative target", strings.Replace(string(good), `"target":"/`, `"target":"`, 1), false},
		{"tag reference", strings.Replace(string(good), "@sha256:", ":v1@x", 1), false},
		{"oversized", string(good) + strings.Repeat(" ", 5000), false},
		{"not JSON", "pointer", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseFile([]byte(tc.raw))
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errdefs.IsInvalidArgument(err) {
				t.Fatalf("err %v is not invalid input", err)
			}
			if tc.ok && (p.ID.String() != testIdentity || p.Target != "/models/llama") {
				t.Fatalf("pointer %+v", p)
			}
		})
	}
}

// FuzzParseFile: whatever the bytes of a pointer file (image
// content), an accepted pointer is one ParseLabels accepts.
func FuzzParseFile(f *testing.F) {
	good, _ := File(testPointer())
	f.Add(good)
	f.Add([]byte(`{"artifact":"h/r@sha256:` + zeros + `","identity":"sha256:` + zeros + `","schema":1,"target":"/a/../b"}`))
	f.Add([]byte(`{"schema":1}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := ParseFile(raw)
		if err != nil {
			return
		}
		if q, _, err := ParseLabels(Labels(p)); err != nil || q.ID != p.ID || q.Target != p.Target {
			t.Fatalf("accepted %+v, which its labels refuse: %v", p, err)
		}
	})
}

const zeros = "0000000000000000000000000000000000000000000000000000000000000000"

const testIdentity = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

func testPointer() Pointer {
	return Pointer{Artifact: "127.0.0.1:5000/models/x@sha256:2222222222222222222222222222222222222222222222222222222222222222",
		ID: artifact.MustParseID(testIdentity), Target: "/models/llama", Files: 3, Bytes: 1 << 30}
}
