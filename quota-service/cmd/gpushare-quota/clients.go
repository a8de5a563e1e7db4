package main

import (
	"fmt"
	"os"
	"strings"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// newNomadClient starts from the Nomad API's defaults, which read
// NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION and the TLS variables
// (NOMAD_CACERT, NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY, NOMAD_SKIP_VERIFY,
// ...), and applies the flags over them.
func newNomadClient(o *options) (*nomadapi.Client, error) {
	cfg := nomadapi.DefaultConfig()
	// The service works across namespaces, naming each request's;
	// NOMAD_NAMESPACE must not narrow those that name none.
	cfg.Namespace = ""
	if o.nomadAddr != "" {
		cfg.Address = o.nomadAddr
	}
	if o.nomadTokenFile != "" {
		token, err := readToken(o.nomadTokenFile)
		if err != nil {
			return nil, fmt.Errorf("-nomad-token-file: %w", err)
		}
		cfg.SecretID = token
	}
	client, err := nomadapi.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("the Nomad client for %s (NOMAD_ADDR, -nomad-addr; TLS from NOMAD_CACERT and friends): %w", cfg.Address, err)
	}
	return client, nil
}

// newConsulClient starts from the Consul API's defaults, which read
// CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN(_FILE) and the TLS variables
// (CONSUL_CACERT, CONSUL_CLIENT_CERT, CONSUL_CLIENT_KEY,
// CONSUL_HTTP_SSL_VERIFY, ...), and applies the flags over them.
// It returns the address too.
func newConsulClient(o *options) (*consulapi.Client, string, error) {
	cfg := consulapi.DefaultConfig()
	if o.consulAddr != "" {
		cfg.Address = o.consulAddr
	}
	if o.consulTokenFile != "" {
		if _, err := readToken(o.consulTokenFile); err != nil {
			return nil, "", fmt.Errorf("-consul-token-file: %w", err)
		}
		cfg.TokenFile = o.consulTokenFile
	}
	client, err := consulapi.NewClient(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("the Consul client for %s (CONSUL_HTTP_ADDR, -consul-addr; TLS from CONSUL_CACERT and friends): %w", cfg.Address, err)
	}
	return client, cfg.Scheme + "://" + cfg.Address, nil
}

// readToken reads a token file: the token, surrounding white space
// dropped.
func readToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the token: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("%s is empty: write the token's secret ID into it", path)
	}
	return token, nil
}
