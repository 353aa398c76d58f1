package peer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/weightsnap/weightsnap/internal/storetest"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client certificate.
type testPKI struct {
	pool           *x509.CertPool
	server, client tls.Certificate
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(n int64, usage x509.ExtKeyUsage) tls.Certificate {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: "node"},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
	}
	p := &testPKI{pool: x509.NewCertPool(), server: issue(2, x509.ExtKeyUsageServerAuth), client: issue(3, x509.ExtKeyUsageClientAuth)}
	p.pool.AddCert(ca)
	return p
}

// TestMutualTLS: a server that requires client certificates serves a client
// that has one (the rails stay plain TCP, attached by the session secret),
// and refuses one without, and a plain control connection.
func TestMutualTLS(t *testing.T) {
	pki := newPKI(t)
	d, id := storetest.Seeded(t, 4<<20, 2)
	_, addr := serve(t, d, ServerConfig{Token: "t", TLS: &tls.Config{Certificates: []tls.Certificate{pki.server},
		ClientCAs: pki.pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}})
	fetch := func(c ClientConfig) error {
		c.Token, c.Timeout = "t", 5*time.Second
		l, _, err := Fetch(context.Background(), storetest.Open(t), []string{addr}, digestOf(t, id), FetchOptions{Client: c, Patience: time.Millisecond})
		if err == nil {
			l.Close()
		}
		return err
	}
	if err := fetch(ClientConfig{TLS: &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}}); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	if err := fetch(ClientConfig{TLS: &tls.Config{RootCAs: pki.pool}}); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if err := fetch(ClientConfig{}); !errdefs.IsPermissionDenied(err) {
		t.Fatalf("plain control connection: %v", err)
	}
	if _, err := (ClientConfig{Token: "t", TLS: &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}}).List(context.Background(), addr); err != nil {
		t.Fatalf("list over mTLS: %v", err)
	}
}
