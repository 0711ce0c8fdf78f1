// TLS for the gomemcache suite: when MEMCACHED_TLS_CA names a CA certificate
// (PEM), every client of the suite dials through crypto/tls (gomemcache's
// Client.DialContext set to a tls.Dialer's), verifying the server against
// that CA only, so the same cases run over TLS. tests/clients/test_go.py
// sets it for servers started with -Z.
//
// Environment (all optional; without MEMCACHED_TLS_CA the suite is plaintext
// and the TLS-only tests below are skipped):
//
//	MEMCACHED_TLS_CA            the CA the server's certificate is checked against
//	MEMCACHED_TLS_CERT/_KEY     a client certificate and its key (an mtls: listener)
//	MEMCACHED_TLS_MAX_VERSION   "1.2" caps the client at TLS 1.2 (default: up to 1.3)
//	MEMCACHED_TLS_UNTRUSTED_CA  a CA that did not sign the server's certificate
package clients

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

// tlsConfig is the client's TLS configuration trusting only the CA in
// caFile (with MEMCACHED_TLS_CERT/_KEY as its certificate when withCert),
// or nil when caFile is empty.
func tlsConfig(t *testing.T, caFile string, withCert bool) *tls.Config {
	t.Helper()
	if caFile == "" {
		return nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatalf("reading the CA certificate: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", caFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if os.Getenv("MEMCACHED_TLS_MAX_VERSION") == "1.2" {
		cfg.MaxVersion = tls.VersionTLS12
	}
	certFile, keyFile := os.Getenv("MEMCACHED_TLS_CERT"), os.Getenv("MEMCACHED_TLS_KEY")
	if withCert && certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatalf("loading the client certificate: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg
}

// useTLS makes c dial with cfg (the handshake is part of the dial, so a
// server that fails verification fails the dial); nil leaves c plaintext.
func useTLS(c *memcache.Client, cfg *tls.Config) {
	if cfg == nil {
		return
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: cfg}
	c.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
		return d.DialContext(ctx, network, address)
	}
}

// suiteTLS is the suite's TLS configuration (nil: plaintext).
func suiteTLS(t *testing.T) *tls.Config {
	return tlsConfig(t, os.Getenv("MEMCACHED_TLS_CA"), true)
}

func requireTLS(t *testing.T) {
	t.Helper()
	if os.Getenv("MEMCACHED_TLS_CA") == "" {
		t.Skip("plaintext run (MEMCACHED_TLS_CA not set)")
	}
}

// A client that only trusts another CA refuses the server's certificate:
// the dial fails with an unknown-authority error and nothing is sent. The
// server goes on serving clients that trust it.
func TestTLSUntrustedServerCertificate(t *testing.T) {
	requireTLS(t)
	untrusted := os.Getenv("MEMCACHED_TLS_UNTRUSTED_CA")
	if untrusted == "" {
		t.Fatal("MEMCACHED_TLS_UNTRUSTED_CA is not set (run via tests/clients/test_go.py)")
	}
	rogue := memcache.New(server(t))
	rogue.Timeout = 10 * time.Second
	useTLS(rogue, tlsConfig(t, untrusted, true))
	t.Cleanup(func() { rogue.Close() })
	for i := 0; i < 3; i++ {
		err := rogue.Set(&memcache.Item{Key: pk("untrusted"), Value: []byte("x")})
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Fatalf("set through a client that does not trust the server: got %v, "+
				"want an x509.UnknownAuthorityError", err)
		}
	}
	c := client(t)
	if err := c.Ping(); err != nil {
		t.Fatalf("ping after the refused handshakes: %v", err)
	}
	wantMiss(t, c, pk("untrusted"))
	mustSet(t, c, pk("untrusted_after"), []byte("ok"))
	wantValue(t, c, pk("untrusted_after"), []byte("ok"))
}

// On an mtls: listener (MEMCACHED_TLS_CERT set) a client without a
// certificate gets no answer: the handshake or the first reply fails (with
// TLS 1.3 the server checks the certificate after the client's handshake is
// done, so the refusal arrives on the first read).
func TestTLSClientCertificateRequired(t *testing.T) {
	requireTLS(t)
	if os.Getenv("MEMCACHED_TLS_CERT") == "" {
		t.Skip("no client certificate in this run: not an mtls: listener")
	}
	anon := memcache.New(server(t))
	anon.Timeout = 10 * time.Second
	useTLS(anon, tlsConfig(t, os.Getenv("MEMCACHED_TLS_CA"), false))
	t.Cleanup(func() { anon.Close() })
	if err := anon.Set(&memcache.Item{Key: pk("anon"), Value: []byte("x")}); err == nil {
		t.Fatal("set without a client certificate on an mtls: listener succeeded")
	}
	c := client(t)
	wantMiss(t, c, pk("anon"))
	if err := c.Ping(); err != nil {
		t.Fatalf("ping with the client certificate: %v", err)
	}
}
