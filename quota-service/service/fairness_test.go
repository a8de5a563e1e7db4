package service_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
)

// projectView is name's line in svc's status.
func projectView(svc *service.Service, name string) (service.ProjectView, bool) {
	for _, p := range svc.Status().Projects {
		if p.Project == name {
			return p, true
		}
	}
	return service.ProjectView{}, false
}

// TestTimeAwareFairShare: with time-aware fair share on (half-life 10 s,
// usage weight 2), team-a, which has held the whole node, deserves much
// less of the surplus than team-b, which has held none; a new leader goes
// on from the stored usage; and team-b, asking for 3 GPUs, reclaims them
// from team-a (without the history both would deserve 2 and team-b would
// get 2). team-b's jobs then stay: its quota's min_runtime protects them
// from team-a's fair-share reclaim while the histories even out.
func TestTimeAwareFairShare(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "fairness-test")
	s.quota("team-a", `{"guaranteed": 0, "min_runtime": "10m"}`)
	s.quota("team-b", `{"guaranteed": 0, "min_runtime": "10m"}`)
	timeAware := func(cfg *service.Config) { cfg.FairShareHalfLife, cfg.FairShareUsageWeight = 10*time.Second, 2 }
	first, stopFirst := s.startInstance("qa", timeAware, nil)
	waitLeader(t, first)
	a := jobsOf("team-a", 4, 1)
	for i := range a {
		a[i].meta = map[string]string{nomadwatch.MetaMinRuntime: "0s"}
		s.submit(a[i])
	}
	s.wait(90*time.Second, "running", isRunning, a...)
	testcluster.Eventually(t, 90*time.Second, func() error {
		pa, _ := projectView(first, "team-a")
		pb, _ := projectView(first, "team-b")
		if pa.SurplusFactor > 0.3 || pa.RecentSurplusGPUHours <= 0 || pb.SurplusFactor != 1 {
			return fmt.Errorf("team-a used %v GPU-hours of surplus, factor %v; team-b factor %v: want team-a's factor at most 0.3, team-b's 1",
				pa.RecentSurplusGPUHours, pa.SurplusFactor, pb.SurplusFactor)
		}
		return nil
	})

	stopFirst()
	second, _ := s.startInstance("qb", timeAware, nil)
	testcluster.Eventually(t, 30*time.Second, func() error {
		pa, ok := projectView(second, "team-a")
		if !ok {
			return fmt.Errorf("no cycle yet")
		}
		if pa.SurplusFactor > 0.5 {
			return fmt.Errorf("the new leader's factor for team-a is %v: want the stored history (at most 0.5), not a fresh one", pa.SurplusFactor)
		}
		return nil
	})

	b := jobsOf("team-b", 3, 1)
	for _, j := range b {
		s.submit(j)
	}
	s.wait(120*time.Second, "running", isRunning, b...)
	waitCycles(t, second, 5)
	s.wait(10*time.Second, "still running", isRunning, b...)
	if suspended, err := s.suspendedOf(a); err != nil || len(suspended) != 3 {
		t.Errorf("suspended of team-a: %v (%v); want 3 jobs", suspended, err)
	}
	hist, err := s.store.History(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range hist {
		if e.Event == state.EventSuspend && e.Namespace == "team-a" && !strings.Contains(e.Reason, "above its deserved share") {
			t.Errorf("team-a's job %s was suspended for %q: want it above its deserved share", e.Job, e.Reason)
		}
		if e.Event == state.EventSuspend && e.Namespace == "team-b" {
			t.Errorf("team-b's job %s was suspended (%s): its minimum runtime protects it", e.Job, e.Reason)
		}
	}
}
