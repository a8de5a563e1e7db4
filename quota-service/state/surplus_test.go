package state

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/agentfake"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
	"github.com/gpushare/nomad-gpushare/quota-service/surplususe"
)

// fixedKeys is a key source that always loads testKeys.
type fixedKeys struct{}

func (fixedKeys) Load(context.Context) (*recordkey.Keyring, error) { return testKeys, nil }
func (fixedKeys) Describe() string                                 { return "test keys" }

// TestSurplusUseIsSigned: the stored use of the surplus reads back as
// written; a record changed by hand is refused, so that nobody steers fair
// share through Consul.
func TestSurplusUseIsSigned(t *testing.T) {
	consul := agentfake.NewConsul()
	defer consul.Close()
	s := New(consul.Client(), kvlayout.New("gp"))
	s.Keys = fixedKeys{}
	ctx := context.Background()
	if _, found, err := s.SurplusUse(ctx); err != nil || found {
		t.Fatalf("empty store: found %v, %v", found, err)
	}
	want := surplususe.Record{At: time.Unix(1000, 123).UTC(), Projects: map[string]float64{"team-a": 1.0 / 3, "team-b": 2.5}}
	if err := s.PutSurplusUse(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, found, err := s.SurplusUse(ctx)
	if err != nil || !found || !got.At.Equal(want.At) || got.Projects["team-a"] != want.Projects["team-a"] || got.Projects["team-b"] != 2.5 {
		t.Fatalf("read back %+v (found %v, %v), want %+v", got, found, err, want)
	}
	key := s.layout.SurplusUse()
	forged := strings.Replace(string(consul.Value(key)), "2.5", "0", 1)
	consul.Set(key, []byte(forged))
	if _, _, err := s.SurplusUse(ctx); err == nil || !strings.Contains(err.Error(), "cannot prove it wrote") {
		t.Errorf("a record changed by hand read with error %v, want it refused", err)
	}
}
