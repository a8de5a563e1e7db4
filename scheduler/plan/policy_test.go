package plan

import (
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// TestPolicyByNameBuildsEveryPolicy checks that every policy a user can name
// is usable on a snapshot, including an empty one (a new cluster), and that
// an unknown name is refused.
func TestPolicyByNameBuildsEveryPolicy(t *testing.T) {
	busy := &cluster.Snapshot{
		Allocations: []cluster.Allocation{{Ask: cluster.Ask{WholeGPUs: 1}}, {Ask: cluster.Ask{Shares: 25}}},
		Pending:     []cluster.Pending{{Ask: cluster.Ask{Shares: 50}, Count: 3}},
	}
	for _, name := range placement.Names() {
		for _, snap := range []*cluster.Snapshot{{}, busy} {
			p, err := PolicyByName(name, 1, snap)
			if err != nil {
				t.Fatalf("PolicyByName(%q) on %d allocations: %v", name, len(snap.Allocations), err)
			}
			if p.Name() != name {
				t.Fatalf("PolicyByName(%q) built %q", name, p.Name())
			}
		}
	}
	if _, err := PolicyByName("nope", 1, busy); err == nil {
		t.Fatal("PolicyByName accepted an unknown policy name")
	}
}
