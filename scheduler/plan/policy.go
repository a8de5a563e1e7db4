package plan

import (
	"fmt"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// PolicyByName returns the named placement policy (placement.Names) for
// planning on snap. Policies that measure fragmentation against an expected
// task mix (fgd, gpushare) get the snapshot's own (SnapshotWorkload).
func PolicyByName(name string, seed int64, snap *cluster.Snapshot) (placement.Policy, error) {
	var w *placement.Workload
	if placement.NeedsWorkload(name) {
		w = SnapshotWorkload(snap)
	}
	return PolicyWithWorkload(name, seed, w)
}

// PolicyWithWorkload returns the named placement policy measuring
// fragmentation against task mix w, for the policies that need one: a
// caller that plans often may keep a mix across cycles while the
// cluster's work changes little. w is ignored by the other policies.
func PolicyWithWorkload(name string, seed int64, w *placement.Workload) (placement.Policy, error) {
	if !placement.NeedsWorkload(name) {
		return placement.ByName(name, seed)
	}
	if w == nil {
		w = placement.NewWorkload(nil, placement.DefaultCoverage)
	}
	p, err := placement.ByName(name, seed, placement.WithWorkload(w))
	if err != nil {
		return nil, fmt.Errorf("placement policy for the snapshot: %w", err)
	}
	return p, nil
}

// SnapshotWorkload is snap's task mix: the asks of every running
// allocation and of every pending instance.
func SnapshotWorkload(snap *cluster.Snapshot) *placement.Workload {
	return placement.NewWorkload(placement.SnapshotTasks(snap), placement.DefaultCoverage)
}
