package plan

import (
	"fmt"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// PolicyByName returns the named placement policy (placement.Names) for
// planning on snap. Policies that measure fragmentation against an expected
// task mix (fgd, gpushare) get the snapshot's own: the asks of every running
// allocation and of every pending instance. Build one per planning cycle,
// so the mix follows the cluster.
func PolicyByName(name string, seed int64, snap *cluster.Snapshot) (placement.Policy, error) {
	if !placement.NeedsWorkload(name) {
		return placement.ByName(name, seed)
	}
	p, err := placement.ByName(name, seed,
		placement.WithWorkload(placement.NewWorkload(placement.SnapshotTasks(snap), placement.DefaultCoverage)))
	if err != nil {
		return nil, fmt.Errorf("placement policy for the snapshot: %w", err)
	}
	return p, nil
}
