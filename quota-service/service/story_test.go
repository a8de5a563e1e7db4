package service_test

import (
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/httpapi"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
)

// TestBothInstancesTellTheSameStory: after the leader reclaims two GPUs
// for team-b, the standby's /v1/status shows the same recent actions
// (read from the KV history, not the leader's memory) and the same
// suspended jobs with their reasons; every project line carries the time
// of the listing it comes from, in /v1/status and /v1/projects; and each
// project's suspended count is the length of its list of suspended jobs,
// also after a person drops one of the records (the leader writes it
// again from Nomad).
func TestBothInstancesTellTheSameStory(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "story-test")
	s.quota("team-a", `{"guaranteed": 2}`)
	s.quota("team-b", `{"guaranteed": 2}`)
	q1, _ := s.startInstance("q1", nil, nil)
	waitLeader(t, q1)
	q2, _ := s.startInstance("q2", nil, nil)
	var urls []string
	for _, q := range []*service.Service{q1, q2} {
		// Nomad runs without ACLs here: NomadAccess lets every request
		// see everything.
		srv := httptest.NewServer(httpapi.New(httpapi.Config{Source: q, Registry: q.Registry(), Access: httpapi.NewNomadAccess(c.Nomad, 0)}))
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}

	a, b := jobsOf("team-a", 4, 1), jobsOf("team-b", 2, 1)
	for _, j := range a {
		s.submit(j)
	}
	s.wait(90*time.Second, "running", isRunning, a...)
	_, suspended := s.reclaim(a, b, 2)
	var victims []string
	for _, j := range suspended {
		victims = append(victims, j.ns+"/"+j.id)
	}
	slices.Sort(victims)

	testcluster.Eventually(t, 60*time.Second, func() error {
		return sameStory(urls, victims)
	})

	// A person drops one record: the leader writes it again from Nomad's
	// tagged version, and both instances still count and list both.
	if _, err := s.c.Consul.KV().Delete(s.layout.Suspension(suspended[0].ns, suspended[0].id), nil); err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, 60*time.Second, func() error {
		if got := s.historyOf(suspended[0]); !slices.Contains(got, state.EventRecordRebuilt) {
			return fmt.Errorf("history of %s/%s: %v, want record-rebuilt", suspended[0].ns, suspended[0].id, got)
		}
		return sameStory(urls, victims)
	})
}

// sameStory reads /v1/status and /v1/projects of every instance and checks
// that each tells that exactly victims (namespace/job, sorted) are
// suspended, with a reason, that team-a's count agrees, that the recent
// actions name a suspension of each victim and are the same everywhere,
// and that every project line has its time.
func sameStory(urls []string, victims []string) error {
	var first []state.Entry
	for i, url := range urls {
		var st service.Status
		if err := getJSON(url+"/v1/status", &st); err != nil {
			return err
		}
		var listed []string
		for _, j := range st.Suspended {
			if j.Reason == "" || j.ForProject != "team-b" {
				return fmt.Errorf("%s: suspended %s/%s without a reason or not for team-b: %+v", st.Instance, j.Namespace, j.Job, j)
			}
			listed = append(listed, j.Namespace+"/"+j.Job)
		}
		if !slices.Equal(listed, victims) {
			return fmt.Errorf("%s lists suspended %v, want %v", st.Instance, listed, victims)
		}
		if err := countsAgree(st); err != nil {
			return err
		}
		var projects []service.ProjectView
		if err := getJSON(url+"/v1/projects", &projects); err != nil {
			return err
		}
		if err := linesDated(st.Instance, projects); err != nil {
			return err
		}
		for _, v := range victims {
			if !slices.ContainsFunc(st.Recent, func(e state.Entry) bool {
				return e.Event == state.EventSuspend && e.Namespace+"/"+e.Job == v && e.By == "q1"
			}) {
				return fmt.Errorf("%s's recent actions lack q1's suspension of %s: %+v", st.Instance, v, st.Recent)
			}
		}
		if i == 0 {
			first = st.Recent
		} else if !slices.EqualFunc(first, st.Recent, func(x, y state.Entry) bool { return x.Time.Equal(y.Time) && x.Event == y.Event && x.Job == y.Job }) {
			return fmt.Errorf("recent actions differ between instances:\n%+v\n%+v", first, st.Recent)
		}
	}
	return nil
}

// countsAgree checks that each project's suspended count is the number of
// its jobs in the status's list.
func countsAgree(st service.Status) error {
	for _, p := range st.Projects {
		n := 0
		for _, j := range st.Suspended {
			if j.Project == p.Project {
				n++
			}
		}
		if p.SuspendedJobs != n {
			return fmt.Errorf("%s: project %s counts %d suspended jobs, lists %d", st.Instance, p.Project, p.SuspendedJobs, n)
		}
	}
	return nil
}

// linesDated checks that every project line carries a recent time.
func linesDated(instance string, projects []service.ProjectView) error {
	if len(projects) == 0 {
		return fmt.Errorf("%s lists no projects", instance)
	}
	for _, p := range projects {
		if age := time.Since(p.Updated); p.Updated.IsZero() || age > 5*time.Minute || age < -time.Minute {
			return fmt.Errorf("%s: project %s updated %s", instance, p.Project, p.Updated)
		}
	}
	return nil
}
