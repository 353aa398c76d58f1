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
		{"hf layout", func(m map[string]string) { m[LabelLayout] = LayoutHF; m[LabelRepo] = "meta-llama/Llama-3.1-8B" }, true, ""},
		{"hf layout, repo without org", func(m map[string]string) { m[LabelLayout] = LayoutHF; m[LabelRepo] = "gpt2" }, true, ""},
		{"layout unknown", func(m map[string]string) { m[LabelLayout] = "diffusers"; m[LabelRepo] = "a/b" }, true, LabelLayout},
		{"layout upper case", func(m map[string]string) { m[LabelLayout] = "HF"; m[LabelRepo] = "a/b" }, true, LabelLayout},
		{"layout empty", func(m map[string]string) { m[LabelLayout] = "" }, true, LabelLayout},
		{"hf layout without repo", func(m map[string]string) { m[LabelLayout] = LayoutHF }, true, LabelRepo},
		{"hf layout, empty repo", func(m map[string]string) { m[LabelLayout] = LayoutHF; m[LabelRepo] = "" }, true, LabelRepo},
		{"repo without layout", func(m map[string]string) { m[LabelRepo] = "a/b" }, true, LabelRepo},
		{"repo with two slashes", func(m map[string]string) { m[LabelLayout] = LayoutHF; m[LabelRepo] = "a/b/c" }, true, LabelRepo},
		{"repo with dot-dot", func(m map[string]string) { m[LabelLayout] = LayoutHF; m[LabelRepo] = "../etc" }, true, LabelRepo},
		{"repo with double dash", func(m map[string]string) { m[LabelLayout] = LayoutHF; m[LabelRepo] = "a--b/c" }, true, LabelRepo},
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
				if ok && (p.Artifact != testPointer().Artifact || p.ID.String() != testIdentity || p.Target != "/models/llama" || p.Mode != m[LabelMode] ||
					p.Layout != m[LabelLayout] || p.Repo != m[LabelRepo]) {
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

// FuzzParseLayoutLabels: whatever the layout and repo labels, an accepted
// pointer has no layout and no repo, or the hf layout and a repo id whose
// view directory stays one folder inside its target.
func FuzzParseLayoutLabels(f *testing.F) {
	f.Add(LayoutHF, "meta-llama/Llama-3.1-8B", true, true)
	f.Add(LayoutHF, "../../etc", true, true)
	f.Add("files", "", true, false)
	f.Add("", "a/b", false, true)
	f.Add(LayoutHF, "a/b/c", true, true)
	f.Fuzz(func(t *testing.T, layout, repo string, hasLayout, hasRepo bool) {
		labels := testLabels()
		if hasLayout {
			labels[LabelLayout] = layout
		}
		if hasRepo {
			labels[LabelRepo] = repo
		}
		p, ok, err := ParseLabels(labels)
		if !ok {
			t.Fatal("weight labels were taken for an ordinary layer")
		}
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("err %v is not invalid input", err)
			}
			return
		}
		switch p.Layout {
		case "":
			if hasLayout || hasRepo || p.Repo != "" || ViewDir(p) != p.Target {
				t.Fatalf("accepted %+v from layout %q (%v) repo %q (%v)", p, layout, hasLayout, repo, hasRepo)
			}
		case LayoutHF:
			dir, folder := filepath.Split(ViewDir(p))
			if p.Repo != repo || dir != p.Target+"/" || !strings.HasPrefix(folder, "models--") || strings.Count(p.Repo, "/") > 1 {
				t.Fatalf("accepted %+v: view %q", p, ViewDir(p))
			}
			if q, _, err := ParseLabels(Labels(p)); err != nil || q.Layout != p.Layout || q.Repo != p.Repo {
				t.Fatalf("labels of %+v read back as %+v, %v", p, q, err)
			}
		default:
			t.Fatalf("accepted layout %q", p.Layout)
		}
	})
}

// TestViewDir: an hf pointer's files sit in its repository folder, the
// target being the cache root; any other pointer's in the target.
func TestViewDir(t *testing.T) {
	flat := testPointer()
	hf := testPointer()
	hf.Target, hf.Layout, hf.Repo = "/hub", LayoutHF, "meta-llama/Llama-3.1-8B"
	for _, tc := range []struct {
		p                  Pointer
		view, file, notice string
	}{
		{flat, "/models/llama", "/models/llama/.weightsnap/pointers/" + strings.Repeat("1", 64) + ".json", "/models/llama/" + NoticeName},
		{hf, "/hub/models--meta-llama--Llama-3.1-8B", "/hub/models--meta-llama--Llama-3.1-8B/.weightsnap/pointers/" + strings.Repeat("1", 64) + ".json", "/hub/models--meta-llama--Llama-3.1-8B/" + NoticeName},
	} {
		if v, f, n := ViewDir(tc.p), Path(tc.p), NoticePath(tc.p); v != tc.view || f != tc.file || n != tc.notice {
			t.Errorf("%+v: view %s file %s notice %s", tc.p, v, f, n)
		}
	}
	if n := string(Notice(hf)); !strings.Contains(n, "--layout hf --repo meta-llama/Llama-3.1-8B") || !strings.Contains(n, "HF_HUB_CACHE=/hub") {
		t.Errorf("hf notice says nothing of the hub cache:\n%s", n)
	}
}

func TestParseFile(t *testing.T) {
	good, err := File(testPointer())
	if err != nil {
		t.Fatal(err)
	}
	preferred := testPointer()
	preferred.Mode = ModePreferred
	withMode, _ := File(preferred)
	hf := testPointer()
	hf.Layout, hf.Repo = LayoutHF, "org/model"
	withLayout, _ := File(hf)
	for _, tc := range []struct {
		name string
		raw  string
		ok   bool
	}{
		{"good", string(good), true},
		{"with a mode", string(withMode), true},
		{"with the hf layout", string(withLayout), true},
		{"unknown layout", strings.Replace(string(withLayout), `"layout":"hf"`, `"layout":"flat"`, 1), false},
		{"bad repo", strings.Replace(string(withLayout), `"repo":"org/model"`, `"repo":"org/../model"`, 1), false},
		{"repo without layout", strings.Replace(string(withLayout), `"layout":"hf",`, ``, 1), false},
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
	hf := testPointer()
	hf.Layout, hf.Repo = LayoutHF, "org/model"
	withLayout, _ := File(hf)
	f.Add(withLayout)
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := ParseFile(raw)
		if err != nil {
			return
		}
		if q, _, err := ParseLabels(Labels(p)); err != nil || q.ID != p.ID || q.Target != p.Target || q.Layout != p.Layout || q.Repo != p.Repo {
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
