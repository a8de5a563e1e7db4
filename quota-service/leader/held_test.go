package leader

import (
	"context"
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/internal/agentfake"
)

// TestHeld: an instance may act only while the lock names it and a
// session holds it; an unreadable lock is no licence either.
func TestHeld(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		session string // "": the key exists unheld; "-": no key
		wantErr string
	}{
		{"held by this instance", "q1", "s1", ""},
		{"held by another", "q2", "s2", `held by "q2"`},
		{"released (no session)", "q1", "", "not held"},
		{"never taken", "", "-", "not held"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			consul := agentfake.NewConsul()
			defer consul.Close()
			if tt.session != "-" {
				consul.Lock("gs/leader", []byte(tt.value), tt.session)
			}
			err := Held(context.Background(), consul.Client(), "gs/leader", "q1")
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Held: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Held: %v, want %q", err, tt.wantErr)
			}
		})
	}
	consul := agentfake.NewConsul()
	client := consul.Client()
	consul.Close()
	if err := Held(context.Background(), client, "gs/leader", "q1"); err == nil {
		t.Fatal("Held with Consul unreachable: no error")
	}
}
