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
	department := func(doc string) {
		t.Helper()
		if _, err := c.Consul.KV().Put(&consulapi.KVPair{Key: s.layout.Department("research"), Value: []byte(doc)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = c.Consul.KV().DeleteTree(s.layout.Root+"/", nil) })
	department(`{"guaranteed": 2, "priority": 3}`)
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

	department(`{"guaranteed": 1}`)
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
