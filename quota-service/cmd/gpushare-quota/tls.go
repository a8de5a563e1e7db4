package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// certReloader serves a certificate from files and reads them again when
// either changes, so a certificate renewed in place (a Nomad template from
// Vault, certbot) is served without a restart.
type certReloader struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	modTime [2]time.Time
}

// serverTLS is the API's TLS configuration; it fails when the files do
// not hold a certificate and its key.
func serverTLS(certFile, keyFile string) (*tls.Config, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if _, err := r.get(); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.get() }}, nil
}

// get returns the certificate, read again if a file changed since; if
// the new files do not load (half written), the last good one stays.
func (r *certReloader) get() (*tls.Certificate, error) {
	var mod [2]time.Time
	for i, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return r.last(fmt.Errorf("-tls-cert/-tls-key: %w", err))
		}
		mod[i] = fi.ModTime()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cert != nil && mod == r.modTime {
		return r.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		if r.cert != nil {
			return r.cert, nil
		}
		return nil, fmt.Errorf("-tls-cert %s and -tls-key %s: %w (PEM certificate chain and its private key)", r.certFile, r.keyFile, err)
	}
	r.cert, r.modTime = &cert, mod
	return r.cert, nil
}

func (r *certReloader) last(err error) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cert != nil {
		return r.cert, nil
	}
	return nil, err
}
