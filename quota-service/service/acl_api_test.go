package service_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/httpapi"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	nomadapi "github.com/hashicorp/nomad/api"
)

// seen is what one token reads in /v1/status.
type seen struct {
	code      int
	projects  []string
	suspended []string
	recent    []string
	body      string
}

func statusAs(t *testing.T, url, token string) seen {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/status", nil)
	if token != "" {
		req.Header.Set("X-Nomad-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := seen{code: resp.StatusCode, body: string(body)}
	if resp.StatusCode != http.StatusOK {
		return out
	}
	var st service.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Projects {
		out.projects = append(out.projects, p.Project)
	}
	for _, j := range st.Suspended {
		out.suspended = append(out.suspended, j.Namespace+"/"+j.Job)
	}
	for _, e := range st.Recent {
		if !slices.Contains(out.recent, e.Namespace) {
			out.recent = append(out.recent, e.Namespace)
		}
	}
	return out
}

// checkStatusByToken: with Nomad's ACLs on, the status API answers only a
// token Nomad knows, and shows it the namespaces it can list jobs in, as
// Nomad decides: team-a's reader sees team-a's project, its suspended jobs
// and their actions, with team-b's workload hidden in the reasons; a token
// that may only submit jobs to team-b (Nomad lists that namespace for it,
// but not its jobs) sees nothing; a management token sees both projects.
// Health stays readable without a token, for Consul's check.
func checkStatusByToken(t *testing.T, c *localcluster.Cluster, svc *service.Service, svcNomad *nomadapi.Client, suspended []gpuJob) {
	t.Helper()
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Source: svc, Registry: svc.Registry(), Access: httpapi.NewNomadAccess(svcNomad, 0)}))
	defer srv.Close()
	reader, err := c.CreateNomadToken("team-a-reader", `namespace "team-a" { policy = "read" }`)
	if err != nil {
		t.Fatal(err)
	}
	submitter, err := c.CreateNomadToken("team-b-submitter", `namespace "team-b" { capabilities = ["submit-job"] }`)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, j := range suspended {
		want = append(want, j.ns+"/"+j.id)
	}
	slices.Sort(want)

	// The status follows the cluster within a cycle or two of the
	// reclaim.
	testcluster.Eventually(t, 30*time.Second, func() error {
		for _, tc := range []struct {
			name, token         string
			code                int
			projects, suspended []string
			recent              []string
		}{
			{"no token", "", http.StatusUnauthorized, nil, nil, nil},
			{"unknown token", "00000000-0000-0000-0000-000000000000", http.StatusForbidden, nil, nil, nil},
			{"team-a's reader", reader, http.StatusOK, []string{"team-a"}, want, []string{"team-a"}},
			{"team-b's submitter", submitter, http.StatusOK, nil, nil, nil},
			{"management", c.NomadToken, http.StatusOK, []string{"team-a", "team-b"}, want, []string{"team-a"}},
		} {
			got := statusAs(t, srv.URL, tc.token)
			slices.Sort(got.projects)
			if got.code != tc.code || !slices.Equal(got.projects, tc.projects) || !slices.Equal(got.suspended, tc.suspended) || !slices.Equal(got.recent, tc.recent) {
				return fmt.Errorf("%s: %d, projects %v, suspended %v, recent actions in %v; want %d, %v, %v, %v\n%.1500s", tc.name,
					got.code, got.projects, got.suspended, got.recent, tc.code, tc.projects, tc.suspended, tc.recent, got.body)
			}
			if tc.name == "team-a's reader" && (strings.Contains(got.body, "team-b/b-job") || !strings.Contains(got.body, "a workload in a namespace your token cannot read")) {
				return fmt.Errorf("team-a's reader sees team-b's jobs, or is not told a hidden workload needed room:\n%s", got.body)
			}
			if tc.name == "management" && !strings.Contains(got.body, "team-b/b-job") {
				return fmt.Errorf("the management token does not see which of team-b's jobs needed room:\n%s", got.body)
			}
		}
		return nil
	})
	resp, err := http.Get(srv.URL + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("health without a token: %s, want 200", resp.Status)
	}
}
