package redis_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tqgo/tqgo/backends/redis"
	"github.com/tqgo/tqgo/internal/redisserver"
	"github.com/tqgo/tqgo/internal/redistest"
	"github.com/tqgo/tqgo/tq"
)

// TestTLSAgainstPlaintext: a rediss:// URL naming a plaintext Redis fails
// within about its dial_timeout (a plaintext Redis waits for the end of an
// inline command the TLS ClientHello never sends, so every handshake waits
// the timeout out, and go-redis's pool dials five times: 5 s at 1 s), with
// an error that says the handshake failed and why it may have.
func TestTLSAgainstPlaintext(t *testing.T) {
	srv := redistest.Start(t)
	url := "rediss://" + srv.Addr() + "/0?dial_timeout=1s"
	start := time.Now()
	s, err := redis.OpenURL(t.Context(), url)
	took := time.Since(start)
	if err == nil {
		s.Close()
		s.Log().Close()
		t.Fatalf("OpenURL(%q) succeeded against a plaintext server", url)
	}
	if took > 3*time.Second {
		t.Errorf("OpenURL took %v with dial_timeout=1s", took)
	}
	for _, want := range []string{"TLS handshake", "failed", "may not speak TLS", "redis://", srv.Addr()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if !errors.Is(err, redis.ErrTimeout) {
		t.Errorf("error %v does not match ErrTimeout", err)
	}
	// The same through tq.Open.
	start = time.Now()
	if _, err := tq.Open(t.Context(), url); err == nil || !strings.Contains(err.Error(), "may not speak TLS") {
		t.Errorf("tq.Open: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("tq.Open took %v with dial_timeout=1s", took)
	}
}

// TestTLSServer: a rediss:// URL opens a Redis that speaks TLS, through
// the dialer OpenURL gives go-redis and its direct connections.
func TestTLSServer(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	redistest.Start(t, redisserver.Options{Args: []string{
		"--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", cert, "--tls-key-file", key,
		"--tls-ca-cert-file", cert, "--tls-auth-clients", "no",
	}})
	url := "rediss://127.0.0.1:" + strconv.Itoa(tlsPort) + "/0?skip_verify=true&dial_timeout=1s&prefix=tlstest"
	c, err := tq.Open(t.Context(), url)
	if err != nil {
		t.Fatalf("tq.Open(%q): %v", url, err)
	}
	defer c.Close()
	keys := []string{"a", "b"}
	data := make([]float32, 2*1000)
	for i := range data {
		data[i] = float32(i)
	}
	if err := c.BatchPut(t.Context(), "p", keys, tq.Batch{"x": tq.Stacked(data, 2, 1000)}, nil); err != nil {
		t.Fatal(err)
	}
	b, err := c.BatchGet(t.Context(), "p", keys, "x")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tq.As[float32](b["x"])
	if err != nil || len(got) != len(data) || got[1999] != 1999 {
		t.Fatalf("read back %d values (%v)", len(got), err)
	}
	// Verified against a certificate for another name: a TLS server,
	// so no hint that it speaks plaintext.
	_, err = redis.OpenURL(t.Context(), "rediss://127.0.0.1:"+strconv.Itoa(tlsPort)+"/0?dial_timeout=1s")
	if err == nil || !strings.Contains(err.Error(), "TLS handshake") || strings.Contains(err.Error(), "may not speak TLS") {
		t.Errorf("an unverified certificate: %v", err)
	}
}

// selfSigned writes a self-signed certificate for "tqtest.invalid" and its
// key under dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tqtest.invalid"},
		DNSNames:              []string{"tqtest.invalid"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
