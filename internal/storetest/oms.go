package storetest

import (
	"context"
	"crypto"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/weightsnap/weightsnap/artifact"
	"github.com/weightsnap/weightsnap/trust"
)

// OMSBundle is an OpenSSF model-signing v1.0 bundle (method files,
// sha256) over files, signed with key, as a model.sig holds it.
func OMSBundle(tb testing.TB, key crypto.Signer, files []artifact.File) []byte {
	tb.Helper()
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b artifact.File) int { return strings.Compare(a.Path, b.Path) })
	var res []map[string]string
	var root []byte
	for _, f := range files {
		res = append(res, map[string]string{"name": f.Path, "digest": f.SHA256, "algorithm": "sha256"})
		d, err := hex.DecodeString(f.SHA256)
		if err != nil {
			tb.Fatal(err)
		}
		root = append(root, d...)
	}
	sum := sha256.Sum256(root)
	st, err := json.Marshal(map[string]any{
		"_type": "https://in-toto.io/Statement/v1", "predicateType": trust.OMSPredicateType,
		"subject":   []map[string]any{{"name": "m", "digest": map[string]string{"sha256": hex.EncodeToString(sum[:])}}},
		"predicate": map[string]any{"resources": res, "serialization": map[string]any{"method": "files", "hash_type": "sha256", "allow_symlinks": false}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	b, err := trust.SignDSSE(context.Background(), key, trust.InTotoPayloadType, st)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// SigningKey is a new ECDSA P-256 signing key and its public key (PEM),
// as a trust policy's keyData names it.
func SigningKey(tb testing.TB) (crypto.Signer, []byte) {
	tb.Helper()
	priv, pub, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), cryptoutils.StaticPasswordFunc(nil))
	if err != nil {
		tb.Fatal(err)
	}
	key, err := trust.LoadPrivateKey(priv, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return key, pub
}
