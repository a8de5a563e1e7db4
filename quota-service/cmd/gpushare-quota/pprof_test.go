package main

import (
	"strings"
	"testing"
)

// TestProfilingEndpointIsLoopbackOnly: the endpoint has no
// authentication, so -pprof-listen takes loopback addresses only.
func TestProfilingEndpointIsLoopbackOnly(t *testing.T) {
	for _, tt := range []struct {
		addr    string
		wantErr string
	}{
		{"", ""},
		{"127.0.0.1:6060", ""},
		{"[::1]:6060", ""},
		{"localhost:6060", ""},
		{"0.0.0.0:6060", "loopback"},
		{":6060", "loopback"},
		{"10.0.0.5:6060", "loopback"},
		{"127.0.0.1", "host:port"},
	} {
		err := checkLoopback(tt.addr)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%q: %v, want accepted", tt.addr, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%q: error %v, want one saying %q", tt.addr, err, tt.wantErr)
		}
	}
}
