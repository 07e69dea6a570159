package tqserve_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tq"
	"github.com/tqgo/tqgo/tqserve"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key
// into dir, and returns their paths.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tq test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"tq.test"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// A server with TLS and a token: a client that trusts its certificate and
// gives the token works; one that does not trust it, or speaks plaintext,
// fails to open with a clear error, within its deadline.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	s := startServer(t, "memory://tqserve-tls", tqserve.WithTLS(cert, key), tqserve.WithToken("s3cret"))
	u, _ := url.Parse(s.URL)
	ctx := context.Background()
	good := openClient(t, "tq://:s3cret@"+u.Host+"?ca="+url.QueryEscape(cert))
	if err := good.Put(ctx, "p", "k", map[string]any{"x": int64(1)}, nil); err != nil {
		t.Fatal(err)
	}
	rows, err := good.List(ctx, "p")
	if err != nil || len(rows.Rows) != 1 {
		t.Fatalf("over TLS: %v, %v", rows, err)
	}
	for bad, says := range map[string]string{
		"tq://:s3cret@" + u.Host + "?tls=1": "certificate", // the system's roots do not trust it
		"tq://:s3cret@" + u.Host:            "preface",     // plaintext to a TLS server
	} {
		octx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := tq.Open(octx, bad, tq.Quiet())
		cancel()
		if err == nil {
			_ = c.Close()
			t.Fatalf("%s: opened", bad)
		}
		if !strings.Contains(err.Error(), says) {
			t.Fatalf("%s: %v; want an error that says why (%q)", bad, err, says)
		}
	}
	if _, err := tqserve.NewServer(ctx, "memory://tqserve-tls2", tqserve.WithTLS(filepath.Join(dir, "missing.pem"), key)); !errors.Is(err, backends.ErrInvalid) {
		t.Fatalf("a missing certificate: %v, want ErrInvalid", err)
	}
}
