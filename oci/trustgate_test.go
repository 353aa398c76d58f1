package oci

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/artifact/synth"
	"github.com/weightsnap/weightsnap/internal/storetest"
	"github.com/weightsnap/weightsnap/oci/registry"
	"github.com/weightsnap/weightsnap/resolve"
	"github.com/weightsnap/weightsnap/store"
	"github.com/weightsnap/weightsnap/trust"
)

// gatePolicy is a policy that wants the repository models/signed of the
// fake registry signed by pub and accepts the rest unsigned.
func gatePolicy(t *testing.T, f *fakeRegistry, pub []byte) *trust.Policy {
	t.Helper()
	doc := fmt.Sprintf(`{"default": [{"type": "insecureAcceptAnything"}], "transports": {"docker": {%q: [{"type": "sigstoreSigned", "keyData": %q}]}}}`,
		f.host()+"/models/signed", base64.StdEncoding.EncodeToString(pub))
	p, err := trust.ParsePolicy("policy.json", []byte(doc), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestResolutionEnforcesPolicy: resolution through the located registry
// provider under a policy that wants one repository signed. A signed
// artifact is fetched and its verification kept beside it; an unsigned
// one, one signed by another key and one whose signature covers another
// manifest are refused as a policy failure naming the scope, before any
// payload byte, and the store holds none of them; another repository
// pulls unsigned. A store hit under a changed policy is checked again:
// refused, it goes to the registry, which refuses it too.
func TestResolutionEnforcesPolicy(t *testing.T) {
	ctx := context.Background()
	key, pubPEM := signKey(t)
	otherKey, otherPub := signKey(t)
	f := newFakeRegistry(t)
	srcs := map[artifact.ID]*artifact.SourceDir{}
	push := func(seed uint64, repoTag string, k PushOptions) (ref string, l *store.Lease) {
		_, src := storetest.CheckpointOf(t, synth.Options{Size: 1 << 20, Shards: 1, DType: "BF16", Seed: seed})
		_, l = imported(t, src)
		srcs[l.ID] = src
		r := remoteFor(t, f, repoTag)
		rep, err := Push(ctx, l, r, k)
		if err != nil {
			t.Fatal(err)
		}
		return r.Name() + "@" + rep.Manifest, l
	}
	signedRef, signed := push(1, "models/signed:good", PushOptions{SignKey: key})
	unsignedRef, unsigned := push(2, "models/signed:bare", PushOptions{})
	otherRef, other := push(3, "models/signed:other", PushOptions{SignKey: otherKey})
	freeRef, free := push(4, "models/free:v1", PushOptions{})
	// The right key's signature over another manifest, attached to this one.
	swapRef, swap := push(5, "models/signed:swap", PushOptions{})
	{
		r := remoteFor(t, f, "models/signed:swap")
		desc, _, err := r.FetchManifest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		good := remoteFor(t, f, "models/signed:good")
		gd, _, err := good.FetchManifest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, err := trust.SignManifest(ctx, key, gd.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := AttachSignature(ctx, r, desc, b, trust.CosignSignPredicate); err != nil {
			t.Fatal(err)
		}
	}

	root := filepath.Join(t.TempDir(), "node")
	runtime := func(pol *trust.Policy) *resolve.Runtime {
		loc := &Locator{Registries: []string{f.host()}, Remote: registry.Options{PlainHTTP: true, DockerConfig: filepath.Join(t.TempDir(), "none.json")}, Policy: pol}
		rt, err := resolve.New(resolve.Config{Mode: resolve.Preferred, Root: root, Trust: &Gate{Policy: pol},
			Locate: func(ctx context.Context, ref string) (resolve.Provider, error) { return loc.Locate(ctx, ref) }})
		if err != nil {
			t.Fatal(err)
		}
		return rt
	}
	rt := runtime(gatePolicy(t, f, pubPEM))
	d, err := rt.Domain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ref  string
		l    *store.Lease
		want string // "" fetched, else in the refusal
	}{
		{"signed", signedRef, signed, ""},
		{"unsigned", unsignedRef, unsigned, "no signature found"},
		{"other key", otherRef, other, "no signature by a key or identity the policy trusts"},
		{"signature of another manifest", swapRef, swap, "no signature by a key or identity the policy trusts"},
		{"other repository", freeRef, free, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.served.Load()
			res, err := rt.Resolve(ctx, resolve.Request{ID: tc.l.ID, Artifact: tc.ref})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				res.Close()
				return
			}
			var fl *resolve.Failure
			var rf *trust.Refusal
			if !errors.As(err, &fl) || fl.Kind != resolve.KindPolicy || !errors.As(err, &rf) || !errdefs.IsPermissionDenied(err) {
				t.Fatalf("got %v, want a policy failure", err)
			}
			if rf.Scope != f.host()+"/models/signed" || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("refusal %v: want scope %s/models/signed and %q", err, f.host(), tc.want)
			}
			if n := f.served.Load() - before; n > 16<<10 {
				t.Fatalf("%d blob bytes served for a refused artifact: the policy is checked after the payload", n)
			}
			if l, err := d.Lookup(ctx, tc.l.ID, ""); err == nil {
				l.Close()
				t.Fatal("the store holds a refused artifact")
			}
		})
	}
	recs, err := Records(d, signed.ID)
	if err != nil || len(recs) != 1 || !recs[0].Signed() || recs[0].Ref != signedRef || recs[0].Verified[0].Key == "" {
		t.Fatalf("record of the signed artifact: %+v, %v", recs, err)
	}
	if recs, err := Records(d, free.ID); err != nil || recs != nil {
		t.Fatalf("record of the unsigned artifact of another repository: %+v, %v", recs, err)
	}
	// A hit is served under the same policy, with no registry request.
	before := f.served.Load()
	res, err := rt.Resolve(ctx, resolve.Request{ID: signed.ID, Artifact: signedRef})
	if err != nil || res.Report.Outcome != resolve.OutcomeHit {
		t.Fatalf("hit: %v %+v", err, res)
	}
	res.Close()
	if f.served.Load() != before {
		t.Fatal("a verified hit asked the registry")
	}
	// The policy now trusts another key: the recorded signature no longer
	// meets it, and neither does the registry's.
	res, err = runtime(gatePolicy(t, f, otherPub)).Resolve(ctx, resolve.Request{ID: signed.ID, Artifact: signedRef})
	if fl := (*resolve.Failure)(nil); !errors.As(err, &fl) || fl.Kind != resolve.KindPolicy {
		t.Fatalf("hit under a changed policy: %v, want a policy failure", err)
	}
	if s := lookupStep(res.Report); s == nil || s.Outcome != resolve.StepFailed || !strings.Contains(s.Detail, "no recorded signature meets it now") {
		t.Fatalf("steps %+v: want the lookup refused", res.Report.Steps)
	}
	res.Close()
	// What a weight peer sends with the artifact: the records its store
	// kept. The receiver checks them offline against its own policy and
	// against the identity and files it receives.
	sent, err := d.Records(signed.ID)
	if err != nil || sent == nil {
		t.Fatalf("record of the signed artifact: %v", err)
	}
	// An unsigned artifact's record, as a store that kept it would send it.
	freeRec := trust.NewRecord(freeRef, mustManifest(t, f, "models/free:v1"), nil, []trust.Verified{{Scope: "default", Type: trust.TypeAcceptAnything}})
	freeSent, err := trust.EncodeRecords([]trust.Record{freeRec})
	if err != nil {
		t.Fatal(err)
	}
	files := func(l *store.Lease) []artifact.File {
		var fs []artifact.File
		for _, e := range l.Index.Files {
			fs = append(fs, e.File)
		}
		return fs
	}
	tampered := files(signed)
	tampered[0].SHA256 = strings.Repeat("0", 64)
	gate := &Gate{Policy: gatePolicy(t, f, pubPEM)}
	for _, tc := range []struct {
		name    string
		c       carrier
		ref     string
		refusal string // "" admitted
	}{
		{"signatures sent", carrier{records: sent, identity: signed.Identity(), files: files(signed)}, signedRef, ""},
		{"stripped", carrier{records: nil, identity: signed.Identity(), files: files(signed)}, signedRef, "carries no signature"},
		{"swapped for another artifact's", carrier{records: sent, identity: unsigned.Identity(), files: files(unsigned)}, unsignedRef, "does not name identity"},
		{"files other than the signed ones", carrier{records: sent, identity: signed.Identity(), files: tampered}, signedRef, "names other files"},
		{"another repository's record", carrier{records: freeSent, identity: free.Identity(), files: files(free)}, signedRef, "the recorded signatures are of"},
		{"garbage", carrier{records: []byte(`{"schema":1,"records":[],"x":1}`), identity: signed.Identity(), files: files(signed)}, signedRef, "unknown field"},
		{"other repository, no signature", carrier{records: nil, identity: free.Identity(), files: files(free)}, freeRef, ""},
	} {
		t.Run("peer "+tc.name, func(t *testing.T) {
			d2 := storetest.Open(t)
			l := tc.c.identity
			id, _ := l.ID()
			err := gate.Admit(ctx, d2, id, tc.ref, &tc.c)
			if tc.refusal == "" {
				if err != nil {
					t.Fatal(err)
				}
				// A kept record binds the files by sha256: the fetch checks it.
				if want := tc.c.records != nil; tc.c.checked != want {
					t.Fatalf("sha256 check asked for: %v, want %v", tc.c.checked, want)
				}
				return
			}
			var rf *trust.Refusal
			if !errors.As(err, &rf) || !strings.Contains(err.Error(), tc.refusal) || rf.Scope != f.host()+"/models/signed" {
				t.Fatalf("got %v, want a refusal of scope %s/models/signed saying %q", err, f.host(), tc.refusal)
			}
			if recs, err := Records(d2, id); err != nil || recs != nil {
				t.Fatalf("a refused source's records were kept: %+v %v", recs, err)
			}
		})
	}
	// rm takes the record with the artifact.
	if err := d.Remove(ctx, signed.ID); err != nil {
		t.Fatal(err)
	}
	if recs, err := Records(d, signed.ID); err != nil || recs != nil {
		t.Fatalf("records after rm: %+v %v", recs, err)
	}
	// An artifact the store holds unverified (imported) is verified by
	// the registry at its first use by a reference the policy wants
	// signed: no payload byte moves, and the record is kept.
	l, _, err := d.GetOrBuild(ctx, storetest.Identity(srcs[signed.ID]), &artifact.Passthrough{Src: srcs[signed.ID]})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	before = f.served.Load()
	res, err = rt.Resolve(ctx, resolve.Request{ID: signed.ID, Artifact: signedRef})
	if s := lookupStep(res.Report); err != nil || s == nil || s.Outcome != resolve.StepFailed || res.Report.Outcome != resolve.OutcomeHit {
		t.Fatalf("unverified hit: %v %+v", err, res.Report)
	}
	res.Close()
	if n := f.served.Load() - before; n > 16<<10 {
		t.Fatalf("%d blob bytes served to verify a held artifact", n)
	}
	if recs, err := Records(d, signed.ID); err != nil || len(recs) != 1 || !recs[0].Signed() {
		t.Fatalf("record after the verification of a held artifact: %+v %v", recs, err)
	}
}

func lookupStep(r *resolve.Report) *resolve.Step {
	for i, s := range r.Steps {
		if s.Name == resolve.StepLookup {
			return &r.Steps[i]
		}
	}
	return nil
}

// carrier is a weight peer's producer as the gate sees it.
type carrier struct {
	records  []byte
	identity artifact.Identity
	files    []artifact.File
	checked  bool // CheckSHA256 was called
}

func (c carrier) Name() string                                   { return "peer-fetch" }
func (c carrier) Produce(context.Context, artifact.Writer) error { return errors.New("not run") }
func (c carrier) CarriedRecords() ([]byte, artifact.Identity, []artifact.File) {
	return c.records, c.identity, c.files
}
func (c *carrier) CheckSHA256() { c.checked = true }

// mustManifest is the manifest bytes of repoTag in the fake registry.
func mustManifest(t *testing.T, f *fakeRegistry, repoTag string) []byte {
	t.Helper()
	_, raw, err := remoteFor(t, f, repoTag).FetchManifest(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
