package service_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	nomadapi "github.com/hashicorp/nomad/api"
)

// The tests of this file check that the service plans on what Nomad will
// really do (docs/design.md, Projects and fair share; Reclaim and preempt):
// job meta read from real registrations, a drained node, a full GPU's
// worth of shares, and a job of two task groups.

// projectLine returns project's line in svc's status.
func projectLine(svc *service.Service, project string) (service.ProjectView, error) {
	for _, p := range svc.Status().Projects {
		if p.Project == project {
			return p, nil
		}
	}
	return service.ProjectView{}, fmt.Errorf("project %s not in the status", project)
}

// waitAllocated waits until svc's status shows each project holding the
// given GPUs ("1.00").
func waitAllocated(t testing.TB, svc *service.Service, want map[string]string) {
	t.Helper()
	testcluster.Eventually(t, 60*time.Second, func() error {
		for project, gpus := range want {
			p, err := projectLine(svc, project)
			if err != nil {
				return err
			}
			if p.Allocated != gpus {
				return fmt.Errorf("project %s holds %s, want %s", project, p.Allocated, gpus)
			}
		}
		return nil
	})
}

// runningGroups is the condition "not stopped, with n allocations running".
func runningGroups(n int) func(jobState) bool {
	return func(st jobState) bool { return !st.stopped && st.running == n }
}

func isSuspended(st jobState) bool { return st.stopped && st.running == 0 }

// TestJobMetaFromRegistration: the project mapping by job meta and the
// non-preemptible flag are read from jobs registered in Nomad. Three jobs
// of namespace lab name project research in their meta (guaranteed 1);
// the newest of them, keep, is non-preemptible. When team-b reclaims two
// GPUs, research (the most above its deserved share) gives its two
// preemptible jobs and keeps keep, which runs within its guarantee; lab's
// own job is not touched.
func TestJobMetaFromRegistration(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "meta-test")
	s.quota("research", `{"guaranteed": 1, "mapping": {"job_meta_key": "project"}}`)
	s.quota("team-b", `{"guaranteed": 2}`)
	svc, _ := s.startQuotaService("q", nil)
	waitLeader(t, svc)

	research := map[string]string{"project": "research"}
	lab := gpuJob{ns: "lab", id: "lab1", whole: 1}
	extra := []gpuJob{{ns: "lab", id: "extra1", whole: 1, meta: research}, {ns: "lab", id: "extra2", whole: 1, meta: research}}
	keep := gpuJob{ns: "lab", id: "keep", whole: 1, meta: map[string]string{"project": "research", "gpushare.preemptible": "false"}}
	// One after the other, so that keep is the newest.
	for _, j := range []gpuJob{lab, extra[0], extra[1], keep} {
		s.submit(j)
		s.wait(90*time.Second, "running", isRunning, j)
	}
	waitAllocated(t, svc, map[string]string{"research": "3.00", "lab": "1.00"})

	b := gpuJob{ns: "team-b", id: "b-pair", whole: 2}
	s.submit(b)
	s.wait(90*time.Second, "running", isRunning, b)
	s.wait(30*time.Second, "suspended", isSuspended, extra...)
	s.wait(10*time.Second, "still running", isRunning, keep, lab)
	recs, err := s.records()
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range extra {
		if r := recs[j.ns+"/"+j.id]; r.Project != "research" || r.ForProject != "team-b" {
			t.Errorf("record of %s = %+v, want project research, for team-b", j.id, r)
		}
	}
	if p, _ := projectLine(svc, "research"); len(p.NonPreemptibleAboveGuarantee) != 0 {
		t.Errorf("research reports non-preemptible work above its guarantee: %v", p.NonPreemptibleAboveGuarantee)
	}
}

// TestDrainedNodeIsNoCapacity: while the only node drains, its GPUs are
// not capacity: work waiting for a GPU is unplaceable (and no demand), and
// nothing is suspended for it, since Nomad would place nothing on the
// freed GPUs. Once the drain is cancelled the waiting work runs on the
// idle GPUs, still without a suspension.
func TestDrainedNodeIsNoCapacity(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "drain-test")
	s.quota("team-a", `{"guaranteed": 0}`)
	s.quota("team-b", `{"guaranteed": 2}`)
	svc, _ := s.startQuotaService("q", nil)
	waitLeader(t, svc)
	a := jobsOf("team-a", 2, 1)
	for _, j := range a {
		s.submit(j)
	}
	s.wait(90*time.Second, "running", isRunning, a...)

	// Batch allocations stay on a draining node until the deadline.
	drain(t, c.Nomad, c.NodeID, &nomadapi.DrainSpec{Deadline: time.Hour})
	t.Cleanup(func() { drain(t, c.Nomad, c.NodeID, nil) })
	b := jobsOf("team-b", 1, 1)
	s.submit(b[0])
	testcluster.Eventually(t, 60*time.Second, func() error {
		st := svc.Status()
		if !slices.ContainsFunc(st.OutOfPlanning, func(l string) bool { return strings.Contains(l, "draining") }) {
			return fmt.Errorf("out of planning: %q, want the draining node", st.OutOfPlanning)
		}
		if !slices.ContainsFunc(st.Unplaceable, func(l string) bool { return strings.HasPrefix(l, "team-b/b-job1/") }) {
			return fmt.Errorf("unplaceable: %q, want team-b/b-job1", st.Unplaceable)
		}
		return nil
	})
	waitCycles(t, svc, 3)
	if p, err := projectLine(svc, "team-b"); err != nil || p.Deserved != "0.00" {
		t.Errorf("team-b %+v (%v): want deserved 0.00, its work fits nowhere", p, err)
	}
	s.wait(10*time.Second, "still running", isRunning, a...)

	drain(t, c.Nomad, c.NodeID, nil)
	s.wait(90*time.Second, "running", isRunning, b...)
	s.wait(10*time.Second, "still running", isRunning, a...)
	if n := countPrefix(s.historyEvents(), string(state.EventSuspend)); n != 0 {
		t.Errorf("%d suspensions, want none: %v", n, s.historyEvents())
	}
}

// drain starts (spec set) or cancels (nil) a drain of the node and waits
// until Nomad shows it.
func drain(t testing.TB, nomad *nomadapi.Client, node string, spec *nomadapi.DrainSpec) {
	t.Helper()
	if _, err := nomad.Nodes().UpdateDrainOpts(node, &nomadapi.DrainOptions{DrainSpec: spec, MarkEligible: spec == nil}, nil); err != nil {
		t.Fatalf("updating the drain of node %s: %v", node, err)
	}
	testcluster.Eventually(t, 30*time.Second, func() error {
		n, _, err := nomad.Nodes().Info(node, nil)
		if err != nil {
			return err
		}
		if draining := spec != nil; n.Drain != draining || (n.SchedulingEligibility == "eligible") == draining {
			return fmt.Errorf("node %s: drain %v, eligibility %s", node, n.Drain, n.SchedulingEligibility)
		}
		return nil
	})
}

// TestFullGPUOfSharesKeepsPlanning: a job holding all 100 shares of one
// GPU counts as one GPU for its project, leaves its node in planning, and
// the service goes on acting: a reclaim for another project works.
func TestFullGPUOfSharesKeepsPlanning(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "full-share-test")
	s.quota("team-s", `{"guaranteed": 1}`)
	s.quota("team-a", `{"guaranteed": 0}`)
	s.quota("team-b", `{"guaranteed": 1}`)
	svc, _ := s.startQuotaService("q", nil)
	waitLeader(t, svc)
	full := gpuJob{ns: "team-s", id: "s-full", shares: 100}
	s.submit(full)
	s.wait(90*time.Second, "running", isRunning, full)
	a := jobsOf("team-a", 3, 1)
	for _, j := range a {
		s.submit(j)
	}
	s.wait(90*time.Second, "running", isRunning, a...)
	waitAllocated(t, svc, map[string]string{"team-s": "1.00", "team-a": "3.00"})
	if st := svc.Status(); st.LastError != "" || len(st.OutOfPlanning) > 0 {
		t.Fatalf("status: last error %q, out of planning %q; want neither", st.LastError, st.OutOfPlanning)
	}

	b := jobsOf("team-b", 1, 1)
	s.reclaim(a, b, 1)
	s.wait(10*time.Second, "still running", isRunning, full)
}

// TestTwoGroupJobSuspendedAndResumedWhole: a job of two task groups is a
// victim as a whole (both groups' GPUs count), and comes back as a whole:
// both groups run again once there is room for both.
func TestTwoGroupJobSuspendedAndResumedWhole(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "groups-test")
	s.quota("team-a", `{"guaranteed": 0}`)
	s.quota("team-b", `{"guaranteed": 2}`)
	svc, _ := s.startQuotaService("q", nil)
	waitLeader(t, svc)
	single := gpuJob{ns: "team-a", id: "a-single", whole: 1}
	pair := gpuJob{ns: "team-a", id: "a-pair", whole: 1, groups: 2}
	s.submit(single)
	s.wait(90*time.Second, "running", isRunning, single)
	s.submit(pair)
	s.wait(90*time.Second, "running", runningGroups(2), pair)
	waitAllocated(t, svc, map[string]string{"team-a": "3.00"})

	b := gpuJob{ns: "team-b", id: "b-two", whole: 2}
	s.submit(b)
	s.wait(90*time.Second, "running", isRunning, b)
	s.wait(30*time.Second, "suspended", isSuspended, pair)
	s.wait(10*time.Second, "still running", isRunning, single)
	recs, err := s.records()
	if err != nil {
		t.Fatal(err)
	}
	if r := recs["team-a/a-pair"]; r.Groups["main"] != 1 || r.Groups["main-2"] != 1 {
		t.Fatalf("record of a-pair = %+v, want both groups", r)
	}

	s.finish(b.ns, b.id)
	s.wait(60*time.Second, "complete", isComplete, b)
	s.wait(90*time.Second, "running again, both groups", runningGroups(2), pair)
	hist := s.historyEvents()
	for _, ev := range []state.Event{state.EventSuspend, state.EventResume} {
		if n := countPrefix(hist, string(ev)+" team-a/a-pair"); n != 1 {
			t.Errorf("%d %q entries for a-pair, want 1: %v", n, ev, hist)
		}
	}
}
