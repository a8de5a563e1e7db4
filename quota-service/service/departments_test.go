package service_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	consulapi "github.com/hashicorp/consul/api"
)

// TestDepartmentsInStatusAndMetrics: a department with two projects, one
// of them running a one-GPU job, is shown in /v1/status with its settings,
// what its projects hold together and their names, each project names its
// department, and the department's gauges say the same; a department
// lowered below its projects' guarantees keeps its last good settings and
// says why in its line.
func TestDepartmentsInStatusAndMetrics(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "departments-test")
	department := s.department
	t.Cleanup(func() { _, _ = c.Consul.KV().DeleteTree(s.layout.Root+"/", nil) })
	department(`{"guaranteed": 2, "priority": 3}`, "research")
	s.quota("team-a", `{"guaranteed": 1, "department": "research"}`)
	s.quota("team-b", `{"guaranteed": 1, "department": "research"}`)
	s.quota("team-c", `{"guaranteed": 1}`)
	svc, _ := s.startQuotaService("q", nil)
	waitLeader(t, svc)
	job := gpuJob{ns: "team-a", id: "dept-train", whole: 1}
	s.submit(job)
	s.wait(90*time.Second, "running", isRunning, job)

	line := func() (service.DepartmentView, error) {
		st := svc.Status()
		for _, d := range st.Departments {
			if d.Name == "research" {
				return d, nil
			}
		}
		return service.DepartmentView{}, fmt.Errorf("no department research in the status: %+v", st.Departments)
	}
	testcluster.Eventually(t, 30*time.Second, func() error {
		d, err := line()
		if err != nil {
			return err
		}
		if d.Guaranteed != "2.00" || d.Priority != 3 || d.Allocated != "1.00" || strings.Join(d.Projects, ",") != "team-a,team-b" || d.Error != "" {
			return fmt.Errorf("research %+v: want guaranteed 2.00, priority 3, 1.00 allocated, projects team-a and team-b, no error", d)
		}
		deps := map[string]string{}
		for _, p := range svc.Status().Projects {
			deps[p.Project] = p.Department
		}
		if deps["team-a"] != "research" || deps["team-b"] != "research" || deps["team-c"] != "" {
			return fmt.Errorf("project departments %v: want team-a and team-b in research, team-c on its own", deps)
		}
		reg := svc.Registry()
		for name, want := range map[string]float64{"gpushare_department_guaranteed_gpus": 2, "gpushare_department_allocated_gpus": 1} {
			if got := metric(t, reg, name, map[string]string{"department": "research"}); got != want {
				return fmt.Errorf("%s{department=research} = %v, want %v", name, got, want)
			}
		}
		return nil
	})

	department(`{"guaranteed": 1}`, "research")
	testcluster.Eventually(t, 30*time.Second, func() error {
		d, err := line()
		if err != nil {
			return err
		}
		if d.Guaranteed != "2.00" || !strings.Contains(d.Error, "add up to 2.00") {
			return fmt.Errorf("research %+v: want the last good guarantee 2.00 and an error saying its projects add up to 2.00", d)
		}
		return nil
	})
}

// department writes department name's document.
func (s *scenario) department(doc, name string) {
	s.t.Helper()
	if _, err := s.c.Consul.KV().Put(&consulapi.KVPair{Key: s.layout.Department(name), Value: []byte(doc)}, nil); err != nil {
		s.t.Fatalf("writing department %s: %v", name, err)
	}
}

// TestDepartmentReclaimsFromSiblingFirst: on the 4-GPU node, department
// ml (guarantee 2) holds 2 through team-b alone (guarantee 1); department
// lab (guarantee 2) holds 2 through team-c (guarantee 1), whose jobs are
// newer. team-a (guarantee 1, in ml) asks for one GPU: it takes it from
// its sibling team-b, not from team-c, although team-c is as far above
// its own guarantee and its jobs are newer (without departments team-c's
// newest job would go, as the victim order takes the newest job among
// projects equally above their deserved shares): ml is at its guarantee,
// so it may not take from
// lab, which is within its own. One job of team-b stops, nothing of
// team-c.
func TestDepartmentReclaimsFromSiblingFirst(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "sibling-test")
	s.department(`{"guaranteed": 2}`, "ml")
	s.department(`{"guaranteed": 2}`, "lab")
	s.quota("team-a", `{"guaranteed": 1, "department": "ml"}`)
	s.quota("team-b", `{"guaranteed": 1, "department": "ml"}`)
	s.quota("team-c", `{"guaranteed": 1, "department": "lab"}`)
	svc, _ := s.startQuotaService("q", nil)
	waitLeader(t, svc)
	b := jobsOf("team-b", 2, 1)
	for _, j := range b {
		s.submit(j)
	}
	s.wait(90*time.Second, "running", isRunning, b...)
	cj := jobsOf("team-c", 2, 1)
	for _, j := range cj {
		s.submit(j)
	}
	s.wait(90*time.Second, "running", isRunning, cj...)
	waitCycles(t, svc, 2)

	// s.reclaim waits until team-a runs and exactly one of team-b's jobs
	// is suspended.
	s.reclaim(b, jobsOf("team-a", 1, 1), 1)
	waitCycles(t, svc, 3)
	if lost, err := s.suspendedOf(cj); err != nil || len(lost) > 0 {
		t.Errorf("team-c's suspended jobs: %v (%v); want none: department lab is within its guarantee", lost, err)
	}
	if hist := s.historyEvents(); countPrefix(hist, "suspend team-b/") != 1 || countPrefix(hist, "suspend team-c/") != 0 {
		t.Errorf("history %v: want one job of team-b suspended and none of team-c", hist)
	}
}
