package extproc_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/director/directortest"
	"github.com/spillway-llm/spillway/extproc"
)

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) (certPath, keyPath string, pool *x509.CertPool) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "spillway-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

func TestTLS(t *testing.T) {
	certPath, keyPath, pool := selfSigned(t)
	env := directortest.New(t, 0, director.Options{})
	env.Store.Update(directortest.Specs("127.0.0.1:8001"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- extproc.Serve(ctx, extproc.NewServer(env.Director, nil), extproc.ServeOptions{Listener: ln, CertPath: certPath, KeyPath: keyPath})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	exchange := func(opt grpc.DialOption) error {
		conn, err := grpc.NewClient(ln.Addr().String(), opt)
		if err != nil {
			return err
		}
		defer conn.Close()
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		s, err := extprocv3.NewExternalProcessorClient(conn).Process(cctx)
		if err != nil {
			return err
		}
		if err := s.Send(reqHeaders("tls", true, nil)); err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}
	if err := exchange(grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool}))); err != nil {
		t.Fatalf("TLS exchange: %v", err)
	}
	if err := exchange(grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
		t.Fatal("a plaintext client got an answer from the TLS port")
	}
	if err := extproc.Serve(ctx, nil, extproc.ServeOptions{Listener: ln, CertPath: certPath}); err == nil {
		t.Fatal("a cert without a key must be refused")
	}
}
