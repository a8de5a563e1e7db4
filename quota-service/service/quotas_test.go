package service_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
)

// TestMalformedQuotaKeepsLastGoodSettings: a quota document that is not
// valid JSON is reported (status key, the project's line in /v1/status, an
// error in the log) and the last good settings stay in force; fixing it
// clears the report. The standby shows the same read-only view.
func TestMalformedQuotaKeepsLastGoodSettings(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "malformed-test")
	s.quota("team-a", `{"guaranteed": 2}`)
	var logs lockedBuffer
	svc, _ := s.startInstance("q", func(cfg *service.Config) { cfg.Log = teeLogger(t, "q", &logs) }, nil)
	waitLeader(t, svc)
	standby, _ := s.startInstance("standby", nil, nil)
	project := func(src *service.Service) (service.ProjectView, error) {
		for _, p := range src.Status().Projects {
			if p.Project == "team-a" {
				return p, nil
			}
		}
		return service.ProjectView{}, fmt.Errorf("team-a not in %s's status", src.Status().Instance)
	}
	// Both instances hold the good settings before the bad document
	// arrives (a project that was never valid has no line at all).
	testcluster.Eventually(t, 20*time.Second, func() error {
		for _, src := range []*service.Service{svc, standby} {
			p, err := project(src)
			if err != nil || p.Guaranteed != "2.00" {
				return fmt.Errorf("%s: team-a %+v (%v), want guaranteed 2.00", src.Status().Instance, p, err)
			}
		}
		return nil
	})

	s.quota("team-a", `{"guaranteed": 3,`)
	testcluster.Eventually(t, 20*time.Second, func() error {
		for _, src := range []*service.Service{svc, standby} {
			p, err := project(src)
			if err != nil {
				return err
			}
			if p.QuotaError == "" || p.Guaranteed != "2.00" {
				return fmt.Errorf("%s: team-a %+v, want a quota error and guaranteed still 2.00", src.Status().Instance, p)
			}
		}
		pair, _, err := c.Consul.KV().Get(s.layout.QuotaError("team-a"), nil)
		if err != nil || pair == nil {
			return fmt.Errorf("no report at %s (%v)", s.layout.QuotaError("team-a"), err)
		}
		if !strings.Contains(string(pair.Value), `"in_force"`) || !strings.Contains(string(pair.Value), `"guaranteed_shares": 200`) {
			return fmt.Errorf("report lacks the settings in force: %s", pair.Value)
		}
		if !strings.Contains(logs.String(), "quota document rejected") {
			return fmt.Errorf("no error in the log yet")
		}
		return nil
	})
	if h := svc.Health(); !h.OK {
		t.Errorf("health %+v: a rejected document is reported per project, the service still works", h)
	}

	s.quota("team-a", `{"guaranteed": 1}`)
	testcluster.Eventually(t, 20*time.Second, func() error {
		p, err := project(svc)
		if err != nil || p.QuotaError != "" || p.Guaranteed != "1.00" {
			return fmt.Errorf("team-a %+v (%v), want no error and guaranteed 1.00", p, err)
		}
		if pair, _, err := c.Consul.KV().Get(s.layout.QuotaError("team-a"), nil); err != nil || pair != nil {
			return fmt.Errorf("report still at %s (%v)", s.layout.QuotaError("team-a"), err)
		}
		return nil
	})
}
