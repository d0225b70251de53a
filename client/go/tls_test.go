// tls_test.go: the client over TLS to a real dlockd with a certificate
// made here (IP 127.0.0.1), and one that refuses an untrusted server.

package dlockd

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// selfSigned writes a certificate for 127.0.0.1 and its key; returns
// their paths and a pool that trusts it.
func selfSigned(t *testing.T) (string, string, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "dlockd test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certf, keyf := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certf, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyf, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return certf, keyf, pool
}

func TestTLS(t *testing.T) {
	certf, keyf, pool := selfSigned(t)
	port := freePort(t)
	d := start(t, "dlockd-tls", dlockdBin(t), port, "--persist", "none", "--port", fmt.Sprint(port),
		"-l", "info", "--tls-cert", certf, "--tls-key", keyf)
	d.waitListening(20 * time.Second)
	ctx := ctxT(t, 60*time.Second)
	c := dial(t, d.addr, TLS(&tls.Config{RootCAs: pool}))
	l, err := c.Lock(ctx, "secure", TTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// from the environment
	t.Setenv("DLOCK_TLS_CA", certf)
	e, err := Dial(ctx, d.addr)
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	// a server whose certificate is not trusted is refused at once
	start := time.Now()
	_, err = Dial(ctx, d.addr, TLS(&tls.Config{}), ConnectTimeout(20*time.Second))
	if !errors.Is(err, ErrUnavailable) || time.Since(start) > 15*time.Second {
		t.Fatalf("untrusted server: %v after %v", err, time.Since(start))
	}
	t.Logf("untrusted server: %v", err)
}
