package service

import (
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// TestTaskMixFollowsTheCluster: the placement policy's task mix is kept
// while the cluster's work changes little and built again when it is
// old or the work changed by more than a few percent; built again from
// the same work, it is the kept one.
func TestTaskMixFollowsTheCluster(t *testing.T) {
	snapOf := func(allocs, pending int) *cluster.Snapshot {
		s := &cluster.Snapshot{Allocations: make([]cluster.Allocation, allocs)}
		for i := range s.Allocations {
			s.Allocations[i].Ask = cluster.Ask{WholeGPUs: 1}
		}
		if pending > 0 {
			s.Pending = []cluster.Pending{{Ask: cluster.Ask{Shares: 50}, Count: pending}}
		}
		return s
	}
	t0 := time.Unix(1000, 0)
	var m taskMix
	first := m.of(snapOf(1000, 0), t0)
	for _, tc := range []struct {
		name          string
		allocs, queue int
		at            time.Duration
		kept          bool
	}{
		{"the same work a second later", 1000, 0, time.Second, true},
		{"a few more instances", 1020, 10, 2 * time.Second, true},
		{"a tenth more instances", 1000, 100, 3 * time.Second, false},
		{"other work, too old", 1000, 10, taskMixMaxAge + time.Second, false},
		{"other work, a clock that went back", 1000, 10, -time.Second, false},
		{"the same work, too old: built again, equal", 1000, 0, taskMixMaxAge + time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := taskMix{workload: first, builtAt: t0, instances: 1000}
			got := m.of(snapOf(tc.allocs, tc.queue), t0.Add(tc.at))
			if kept := got == first; kept != tc.kept {
				t.Errorf("kept = %v, want %v", kept, tc.kept)
			}
		})
	}
}
