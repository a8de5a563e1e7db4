package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA issues certificates for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a certificate for 127.0.0.1 (server and client use) and
// its key into dir, named name.pem and name-key.pem.
func (ca *testCA) issue(t *testing.T, dir, name string, serial int64) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	write(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	write(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})))
	return certFile, keyFile
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// mutualTLSServer answers any request over TLS with a certificate from ca
// and demands a client certificate from ca.
func mutualTLSServer(t *testing.T, ca *testCA, dir string, body string) *httptest.Server {
	t.Helper()
	certFile, keyFile := ca.issue(t, dir, "server", 2)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// TestClientsHonorTLSEnvironment: the Nomad and Consul clients reach
// agents that serve TLS with a private CA and demand client certificates,
// configured only by the usual environment variables, with -nomad-addr
// and -consul-addr given as flags (which must not drop the TLS settings).
func TestClientsHonorTLSEnvironment(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	write(t, filepath.Join(dir, "ca.pem"), string(ca.pem))
	clientCert, clientKey := ca.issue(t, dir, "client", 3)
	nomad := mutualTLSServer(t, ca, dir, `"127.0.0.1:4647"`)
	consul := mutualTLSServer(t, ca, dir, `"127.0.0.1:8300"`)
	for k, v := range map[string]string{
		"NOMAD_CACERT": filepath.Join(dir, "ca.pem"), "NOMAD_CLIENT_CERT": clientCert, "NOMAD_CLIENT_KEY": clientKey,
		"CONSUL_CACERT": filepath.Join(dir, "ca.pem"), "CONSUL_CLIENT_CERT": clientCert, "CONSUL_CLIENT_KEY": clientKey,
		"NOMAD_ADDR": "http://127.0.0.1:1", "CONSUL_HTTP_ADDR": "127.0.0.1:1",
	} {
		t.Setenv(k, v)
	}
	opts, err := parseOptions([]string{"-nomad-addr", nomad.URL, "-consul-addr", consul.URL})
	if err != nil {
		t.Fatal(err)
	}
	n, err := newNomadClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Status().Leader(); err != nil {
		t.Errorf("Nomad over mutual TLS: %v", err)
	}
	c, _, err := newConsulClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status().Leader(); err != nil {
		t.Errorf("Consul over mutual TLS: %v", err)
	}

	// Without the client certificate the agents refuse: the test can fail.
	t.Setenv("NOMAD_CLIENT_CERT", "")
	t.Setenv("NOMAD_CLIENT_KEY", "")
	n, err = newNomadClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Status().Leader(); err == nil {
		t.Error("Nomad answered a client without a certificate")
	}
}

func TestTokensNeverFromTheCommandLine(t *testing.T) {
	for _, args := range [][]string{{"-nomad-token", "s3cr3t"}, {"--consul-token=s3cr3t"}, {"-listen", ":0", "-nomad-token=s3cr3t"}} {
		_, err := parseOptions(args)
		if err == nil || !strings.Contains(err.Error(), "command line") || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%v: %v, want a refusal that does not repeat the token", args, err)
		}
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "nomad-token")
	write(t, tokenFile, "  0b2c-secret\n")
	t.Setenv("NOMAD_TOKEN", "from-env")
	opts, err := parseOptions([]string{"-nomad-token-file", tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("X-Nomad-Token")
		w.Write([]byte(`"x"`))
	}))
	defer srv.Close()
	opts.nomadAddr = srv.URL
	n, err := newNomadClient(opts)
	if err != nil {
		t.Fatal(err)
	}
	n.Status().Leader()
	if got != "0b2c-secret" {
		t.Errorf("Nomad request carried token %q, want the file's", got)
	}
	write(t, tokenFile, "\n")
	if _, err := newNomadClient(opts); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty token file: %v, want an error saying it is empty", err)
	}
}

func TestTLSFlagsGoTogether(t *testing.T) {
	if _, err := parseOptions([]string{"-tls-cert", "/x.pem"}); err == nil || !strings.Contains(err.Error(), "-tls-key") {
		t.Errorf("certificate without key: %v", err)
	}
}

// TestAPIServesTLSAndPicksUpRenewedCertificates: with -tls-cert and
// -tls-key the API answers over HTTPS, and a certificate renewed in place
// is served to the next connection without a restart.
func TestAPIServesTLSAndPicksUpRenewedCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, dir, "api", 10)
	opts := &options{listen: "127.0.0.1:0", tlsCert: certFile, tlsKey: keyFile}
	srv, ln, err := listen(opts, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(ln, "", "")
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	serial := func() int64 {
		t.Helper()
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatalf("TLS to the API: %v", err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if s := serial(); s != 10 {
		t.Fatalf("serving serial %d, want 10", s)
	}
	// Renewed in place (a later modification time).
	later := time.Now().Add(time.Minute)
	ca.issue(t, dir, "api", 11)
	for _, f := range []string{certFile, keyFile} {
		os.Chtimes(f, later, later)
	}
	if s := serial(); s != 11 {
		t.Fatalf("serving serial %d after renewal, want 11", s)
	}
	// A broken renewal keeps the last good certificate.
	write(t, certFile, "garbage")
	os.Chtimes(certFile, later.Add(time.Minute), later.Add(time.Minute))
	if s := serial(); s != 11 {
		t.Fatalf("serving serial %d after a broken renewal, want 11", s)
	}
	if _, _, err := listen(&options{listen: "127.0.0.1:0", tlsCert: certFile, tlsKey: keyFile}, nil); err == nil {
		t.Error("a broken certificate at start is accepted")
	}
}

// TestVersionNeedsNoOtherSetting: -version answers without validating the
// rest of the settings (a half TLS setting here).
func TestVersionNeedsNoOtherSetting(t *testing.T) {
	t.Setenv("GPUSHARE_TLS_CERT", "/x.pem")
	tests := []struct {
		name        string
		args        []string
		wantVersion bool
		wantErr     string
	}{
		{"version", []string{"-version"}, true, ""},
		{"serve", nil, false, "-tls-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseOptions(%q) = %v, want an error saying %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil || o.version != tt.wantVersion {
				t.Fatalf("parseOptions(%q) = %+v, %v", tt.args, o, err)
			}
		})
	}
}
