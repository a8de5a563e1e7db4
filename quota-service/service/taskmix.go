package service

import (
	"reflect"
	"time"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
)

// taskMixMaxAge and taskMixMaxDrift bound how long the placement
// policy's task mix (plan.SnapshotWorkload) is kept across cycles: it is
// built again when older than taskMixMaxAge, or when the cluster's
// running and waiting instances differ from those it was built from by
// more than taskMixMaxDrift of them. The mix is a distribution over
// every allocation (100,000 at 5,000 nodes: about 25 ms a cycle and 7%
// of the service's allocations in a 30 s profile); a cycle seldom moves
// it. A mix built again that equals the kept one is the kept one, so
// that a cycle can take the last plan again (lastPlan).
const (
	taskMixMaxAge   = 10 * time.Second
	taskMixMaxDrift = 0.05
)

// taskMix is the placement policy's task mix, kept across cycles. Only
// the cycle (under cycleMu) uses it.
type taskMix struct {
	workload  *placement.Workload
	builtAt   time.Time
	instances int
}

// of returns the task mix for snap at now: the kept one, or snap's own
// when the kept one is too old or too far from snap.
func (m *taskMix) of(snap *cluster.Snapshot, now time.Time) *placement.Workload {
	n := instances(snap)
	drift := float64(n - m.instances)
	if drift < 0 {
		drift = -drift
	}
	if m.workload == nil || now.Sub(m.builtAt) >= taskMixMaxAge || now.Before(m.builtAt) || drift > taskMixMaxDrift*float64(max(m.instances, 1)) {
		w := plan.SnapshotWorkload(snap)
		if m.workload == nil || !reflect.DeepEqual(w, m.workload) {
			m.workload = w
		}
		m.builtAt, m.instances = now, n
	}
	return m.workload
}

// instances counts snap's running allocations and waiting instances.
func instances(snap *cluster.Snapshot) int {
	n := len(snap.Allocations)
	for i := range snap.Pending {
		n += snap.Pending[i].Count
	}
	return n
}
