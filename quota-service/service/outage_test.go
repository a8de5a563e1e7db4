package service_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/httpapi"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
)

// outage is how long an agent stays away.
const outage = 20 * time.Second

// getHealth reads /v1/health through the HTTP API.
func getHealth(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url + "/v1/health")
	if err != nil {
		t.Fatalf("GET /v1/health: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestOutages: while Nomad or Consul is unreachable for 20 s the service
// says so (/v1/health 503 with the reason, the status's last error,
// gpushare_cycle_ok 0 and gpushare_cycle_errors_total), takes no action (no
// history entry, no suspension counted, no job stopped), and once the agent
// is back it recovers by itself and carries out the reclaim that became due
// meanwhile. It runs on a cluster of its own, since it stops the agents.
func TestOutages(t *testing.T) {
	needCluster(t)
	c, err := newGPUCluster(wholeOnlyPluginConfig, "nvidia/gpu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	t.Run("nomad", func(t *testing.T) {
		s := newScenario(t, c, "outage-nomad")
		// No reclaim is due at first: team-a is guaranteed the node.
		s.quota("team-a", `{"guaranteed": 4}`)
		s.quota("team-b", `{"guaranteed": 0}`)
		svc, _ := s.startInstance("q", nil, nil)
		waitLeader(t, svc)
		srv := httptest.NewServer(httpapi.Handler(svc, svc.Registry()))
		defer srv.Close()
		a, b := jobsOf("team-a", 4, 1), jobsOf("team-b", 2, 1)
		for _, j := range a {
			s.submit(j)
		}
		s.wait(90*time.Second, "running", isRunning, a...)
		for _, j := range b {
			s.submit(j)
		}
		testcluster.Eventually(t, 30*time.Second, func() error {
			if st := svc.Status(); !hasAll(st.Pending, "team-b/b-job1/", "team-b/b-job2/") {
				return fmt.Errorf("team-b's jobs not pending in the status: %v", st.Pending)
			}
			return nil
		})
		susp0 := metric(t, svc.Registry(), "gpushare_suspensions_total", nil)

		c.StopNomad()
		down := time.Now()
		// The reclaim becomes due while the service is blind.
		s.quota("team-a", `{"guaranteed": 2}`)
		s.quota("team-b", `{"guaranteed": 2}`)
		sawBlind := false
		for time.Since(down) < outage {
			code, body := getHealth(t, srv.URL)
			if code == http.StatusServiceUnavailable && strings.Contains(body, "Nomad") &&
				metric(t, svc.Registry(), "gpushare_cycle_ok", nil) == 0 &&
				metric(t, svc.Registry(), "gpushare_cycle_errors_total", map[string]string{"cause": "nomad"}) > 0 &&
				svc.Status().LastError != "" {
				sawBlind = true
			}
			time.Sleep(500 * time.Millisecond) // observation period, not synchronization
		}
		if !sawBlind {
			code, body := getHealth(t, srv.URL)
			t.Errorf("the service never reported Nomad unreachable: health %d %s, status error %q", code, body, svc.Status().LastError)
		}
		if n := metric(t, svc.Registry(), "gpushare_suspensions_total", nil); n != susp0 {
			t.Errorf("suspensions went from %.0f to %.0f while Nomad was unreachable", susp0, n)
		}
		// Nomad answers again somewhere inside StartNomad (which also
		// waits for the node): only actions before the restart began
		// were taken blind.
		restart := time.Now()
		if err := c.StartNomad(); err != nil {
			t.Fatalf("starting Nomad again: %v", err)
		}
		up := time.Now()
		if e := s.entriesBetween(down, restart); len(e) > 0 {
			t.Errorf("actions while Nomad was unreachable: %v", e)
		}
		// Tasks kept running across the restart; the reclaim happens now.
		lost := s.watchNothingLost(append(append([]gpuJob(nil), a...), b...))
		s.wait(90*time.Second, "running", isRunning, b...)
		t.Logf("team-b runs %.2fs after Nomad came back", time.Since(up).Seconds())
		testcluster.Eventually(t, 30*time.Second, func() error {
			sus, err := s.suspendedOf(a)
			if err != nil {
				return err
			}
			if len(sus) != 2 {
				return fmt.Errorf("%d of team-a's jobs suspended, want 2", len(sus))
			}
			if code, body := getHealth(t, srv.URL); code != http.StatusOK {
				return fmt.Errorf("health %d %s", code, body)
			}
			if metric(t, svc.Registry(), "gpushare_cycle_ok", nil) != 1 {
				return fmt.Errorf("gpushare_cycle_ok not back to 1")
			}
			return nil
		})
		if n := s.checkOneSuspendPerJob(); n != 2 {
			t.Errorf("%d jobs suspended, want 2", n)
		}
		if v, polls := lost(); len(v) > 0 {
			t.Fatalf("jobs lost at %d of %d polls:\n%s", len(v), polls, strings.Join(v, "\n"))
		}
	})

	t.Run("consul", func(t *testing.T) {
		s := newScenario(t, c, "outage-consul")
		s.quota("team-a", `{"guaranteed": 2}`)
		s.quota("team-b", `{"guaranteed": 2}`)
		q1, _ := s.startInstance("q1", nil, nil)
		waitLeader(t, q1)
		q2, _ := s.startInstance("q2", nil, nil)
		srv1 := httptest.NewServer(httpapi.Handler(q1, q1.Registry()))
		defer srv1.Close()
		srv2 := httptest.NewServer(httpapi.Handler(q2, q2.Registry()))
		defer srv2.Close()
		a, b := jobsOf("team-a", 4, 1), jobsOf("team-b", 2, 1)
		for _, j := range a {
			s.submit(j)
		}
		s.wait(90*time.Second, "running", isRunning, a...)
		susp0 := metric(t, q1.Registry(), "gpushare_suspensions_total", nil) + metric(t, q2.Registry(), "gpushare_suspensions_total", nil)

		c.StopConsul()
		down := time.Now()
		// The reclaim becomes due while the service cannot read its
		// records: team-b submits work within its guarantee.
		for _, j := range b {
			s.submit(j)
		}
		blind := map[string]bool{}
		for time.Since(down) < outage {
			if l := leaders(q1, q2); len(l) > 1 {
				t.Fatalf("%.1fs into the Consul outage two instances lead: %v", time.Since(down).Seconds(), l)
			}
			for _, src := range []struct {
				svc *service.Service
				url string
			}{{q1, srv1.URL}, {q2, srv2.URL}} {
				code, body := getHealth(t, src.url)
				if code == http.StatusServiceUnavailable && strings.Contains(body, "Consul") &&
					metric(t, src.svc.Registry(), "gpushare_cycle_ok", nil) == 0 {
					blind[src.svc.Status().Instance] = true
				}
			}
			sus, err := s.suspendedOf(a)
			if err != nil {
				t.Fatal(err)
			}
			if len(sus) > 0 {
				t.Fatalf("%.1fs into the Consul outage %s/%s is stopped: no action without records", time.Since(down).Seconds(), sus[0].ns, sus[0].id)
			}
			time.Sleep(500 * time.Millisecond) // observation period, not synchronization
		}
		if !blind["q1"] || !blind["q2"] {
			_, b1 := getHealth(t, srv1.URL)
			_, b2 := getHealth(t, srv2.URL)
			t.Errorf("instances that reported Consul unreachable: %v; health now q1 %s q2 %s", blind, b1, b2)
		}
		if n := metric(t, q1.Registry(), "gpushare_suspensions_total", nil) + metric(t, q2.Registry(), "gpushare_suspensions_total", nil); n != susp0 {
			t.Errorf("suspensions went from %.0f to %.0f while Consul was unreachable", susp0, n)
		}
		restart := time.Now()
		if err := c.StartConsul(); err != nil {
			t.Fatalf("starting Consul again: %v", err)
		}
		up := time.Now()
		// The first read the service decides on answers with what was
		// written before the restart, or fails: never an empty folder
		// from a leader that has not applied its log yet.
		testcluster.Eventually(t, 30*time.Second, func() error {
			pairs, _, err := c.Consul.KV().List(s.layout.Quotas(), state.Consistent(t.Context()))
			if err != nil {
				return err
			}
			if len(pairs) != 2 {
				t.Fatalf("the first consistent read after the restart lists %d quota documents, want 2", len(pairs))
			}
			return nil
		})
		lost := s.watchNothingLost(append(append([]gpuJob(nil), a...), b...))
		// Exactly one leader again, then the reclaim; never two leaders.
		testcluster.Eventually(t, 90*time.Second, func() error {
			l := leaders(q1, q2)
			if len(l) > 1 {
				t.Fatalf("two instances lead after Consul came back: %v", l)
			}
			for _, j := range b {
				st, err := s.jobState(j.ns, j.id)
				if err != nil {
					return err
				}
				if !isRunning(st) {
					return fmt.Errorf("leaders %v; %s/%s not running: %+v", l, j.ns, j.id, st)
				}
			}
			return nil
		})
		t.Logf("team-b runs %.2fs after Consul came back; leaders %v", time.Since(up).Seconds(), leaders(q1, q2))
		if e := s.entriesBetween(down, restart); len(e) > 0 {
			t.Errorf("actions while Consul was unreachable: %v", e)
		}
		testcluster.Eventually(t, 30*time.Second, func() error {
			sus, err := s.suspendedOf(a)
			if err != nil {
				return err
			}
			if len(sus) != 2 {
				return fmt.Errorf("%d of team-a's jobs suspended, want 2", len(sus))
			}
			for _, u := range []string{srv1.URL, srv2.URL} {
				if code, body := getHealth(t, u); code != http.StatusOK {
					return fmt.Errorf("health %d %s", code, body)
				}
			}
			return nil
		})
		if n := s.checkOneSuspendPerJob(); n != 2 {
			t.Errorf("%d jobs suspended, want 2", n)
		}
		if v, polls := lost(); len(v) > 0 {
			t.Fatalf("jobs lost at %d of %d polls:\n%s", len(v), polls, strings.Join(v, "\n"))
		}
	})
}
