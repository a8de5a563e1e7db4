package plan

import (
	"fmt"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// PolicyByName returns the named placement policy (placement.Names) for
// planning on snap. Policies that measure fragmentation against an expected
// task mix (fgd, gpushare) get the snapshot's own: the asks of every running
// allocation and of every pending instance. Build one per planning cycle,
// so the mix follows the cluster.
func PolicyByName(name string, seed int64, snap *model.Snapshot) (placement.Policy, error) {
	if !placement.NeedsWorkload(name) {
		return placement.ByName(name, seed)
	}
	tasks := make([]placement.Task, 0, len(snap.Allocations)+len(snap.Pending))
	for _, a := range snap.Allocations {
		tasks = append(tasks, baseTask(a.Ask))
	}
	for _, w := range snap.Pending {
		t := baseTask(w.Ask)
		for range w.Count {
			tasks = append(tasks, t)
		}
	}
	p, err := placement.ByName(name, seed,
		placement.WithWorkload(placement.NewWorkload(tasks, placement.DefaultCoverage)))
	if err != nil {
		return nil, fmt.Errorf("placement policy for the snapshot: %w", err)
	}
	return p, nil
}
