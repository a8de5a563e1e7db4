package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeSource is a status with two projects, each with a suspended job,
// team-b's suspended for team-a's workload; team-b also counts two jobs
// that are never victims, one of them in namespace team-a.
type fakeSource struct{ health service.Health }

func (f fakeSource) Status() service.Status {
	return service.Status{
		Instance: "q1", Leader: true, LastError: "reading Nomad job team-a/secret-train: timeout",
		Projects: []service.ProjectView{
			{ProjectStatus: state.ProjectStatus{Project: "team-a", Guaranteed: "2.00", SuspendedJobs: 1}},
			{ProjectStatus: state.ProjectStatus{Project: "team-b", Guaranteed: "2.00", Deserved: "1.50", SuspendedJobs: 1}, Namespace: "team-b", SurplusFactor: 0.5,
				NeverVictims: []string{"team-a/secret-vol: may not mount host volume data", "team-b/big: its record would exceed 512 KiB"}},
		},
		Pending:  []string{"team-a/train/main", "team-b/sweep/main"},
		Unplaced: []string{"team-a/train/main: no room"},
		Suspended: []service.SuspendedJob{
			{Namespace: "team-a", Job: "old", Project: "team-a", Reason: "preempt inside project team-a"},
			{Namespace: "team-b", Job: "infer", Project: "team-b", ForWorkload: "team-a/train/main",
				Reason: "reclaim for project team-a: makes room for team-a/train/main on node n1"},
		},
		Recent: []state.Entry{
			{Event: state.EventSuspend, Namespace: "team-b", Job: "infer", ForWorkload: "team-a/train/main",
				Reason: "reclaim for project team-a: makes room for team-a/train/main on node n1"},
			{Event: state.EventSuspend, Namespace: "team-a", Job: "old", Reason: "preempt"},
		},
		Shrunk: []service.ShrunkJob{
			{Namespace: "team-b", Job: "serve", Project: "team-b", Groups: map[string]state.ShrunkGroup{"replicas": {Count: 4, Now: 2}},
				ForWorkload: "team-a/train/main", Reason: "gpushare: shrunk to 2 of 4 for team-a/train/main: reclaim"},
			{Namespace: "team-a", Job: "secret-serve", Project: "team-a", Groups: map[string]state.ShrunkGroup{"g": {Count: 2, Now: 1}}},
		},
		Gangs: []service.GangView{
			{Namespace: "team-a", Job: "secret-gang", Project: "team-a", Placed: 1, Wanted: 4, WaitsFor: "Nomad to place the rest"},
			{Namespace: "team-b", Job: "ddp", Project: "team-b", Placed: 2, Wanted: 3, For: "team-a/secret-gang",
				WaitsFor: "waiting for the whole gang: its GPUs go to gang team-a/secret-gang, earlier in fairness order"},
		},
		OutOfPlanning: []string{"node n2: draining"},
		Warnings:      []string{"job team-a/secret: bad spec"},
		Trend: []service.TrendPoint{
			{At: time.Unix(1000, 0), Projects: map[string]service.ProjectSample{"team-a": {Allocated: 2}, "team-b": {Allocated: 1, Used: ptr(0.25)}}},
			{At: time.Unix(1030, 0), Projects: map[string]service.ProjectSample{"team-a": {Allocated: 3}, "team-b": {Allocated: 0.5, Used: ptr(0.5)}}},
		},
		Nodes: []service.NodeView{{Node: "n1", GPUs: []service.GPUView{
			{Index: 0, Model: "H100", Family: "whole", Capacity: 100, Held: 100,
				Tenants: []service.Tenant{{Namespace: "team-a", Job: "secret-train", Project: "team-a", Shares: 100}}},
			{Index: 1, Model: "H100", Family: "shared", Capacity: 100, Held: 50, Memory: &service.GPUMemory{TotalMiB: 81920},
				Tenants: []service.Tenant{{Namespace: "team-b", Job: "infer", Project: "team-b", Shares: 50,
					Memory: &service.TenantMemory{UsedMiB: 61440, RequestMiB: 40960, LimitMiB: 81920, BorrowedMiB: 20480, GuestOn: ptr(2)}}}},
			// GPU 2 is free for Nomad; the node-level scheduler runs two
			// guests there, one of them team-a's.
			{Index: 2, Model: "H100", Family: "idle", Capacity: 100, Memory: &service.GPUMemory{TotalMiB: 81920, UsedMiB: 71680},
				Guests: []service.Tenant{
					{Namespace: "team-b", Job: "infer", Project: "team-b", Shares: 50,
						Memory: &service.TenantMemory{UsedMiB: 61440, RequestMiB: 40960, LimitMiB: 81920, BorrowedMiB: 20480, Home: ptr(1)}},
					{Namespace: "team-a", Job: "secret-nb", Project: "team-a", Shares: 25,
						Memory: &service.TenantMemory{UsedMiB: 10240, RequestMiB: 20480, LimitMiB: 40960, Home: ptr(3)}},
				}},
			{Index: 3, Model: "H100", Family: "shared", Capacity: 100, Held: 25, Memory: &service.GPUMemory{TotalMiB: 81920},
				Tenants: []service.Tenant{{Namespace: "team-a", Job: "secret-nb", Project: "team-a", Shares: 25,
					Memory: &service.TenantMemory{UsedMiB: 10240, RequestMiB: 20480, LimitMiB: 40960, GuestOn: ptr(2)}}}},
		}}},
	}
}

func (f fakeSource) Health() service.Health { return f.health }

// fakeAccess knows three tokens.
type fakeAccess struct{}

func (fakeAccess) Access(_ context.Context, token string) (Access, error) {
	switch token {
	case "":
		return Access{}, ErrTokenRequired
	case "mgmt":
		return Access{All: true}, nil
	case "team-b-reader":
		return Access{Namespaces: map[string]bool{"team-b": true}}, nil
	case "team-b-operator":
		return Access{Namespaces: map[string]bool{"team-b": true}, Nodes: true}, nil
	default:
		return Access{}, ErrTokenRejected
	}
}

func newTestAPI(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(New(Config{Source: fakeSource{health: service.Health{OK: false, Reason: "reading Nomad job team-a/secret-train: timeout"}},
		Registry: prometheus.NewRegistry(), Access: fakeAccess{}}))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, client *http.Client, u string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestRequestsNeedAToken(t *testing.T) {
	srv := newTestAPI(t)
	for _, tc := range []struct {
		name, path string
		header     map[string]string
		want       int
	}{
		{"status without token", "/v1/status", nil, http.StatusUnauthorized},
		{"projects without token", "/v1/projects", nil, http.StatusUnauthorized},
		{"token in the URL is ignored", "/v1/status?token=mgmt&X-Nomad-Token=mgmt", nil, http.StatusUnauthorized},
		{"unknown token", "/v1/status", map[string]string{"X-Nomad-Token": "nope"}, http.StatusForbidden},
		{"header token", "/v1/status", map[string]string{"X-Nomad-Token": "mgmt"}, http.StatusOK},
		{"bearer token", "/v1/projects", map[string]string{"Authorization": "Bearer team-b-reader"}, http.StatusOK},
		{"health is open", "/v1/health", nil, http.StatusServiceUnavailable},
		{"metrics are open", "/metrics", nil, http.StatusOK},
		{"the page's script is open", "/dashboard.js", nil, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, http.DefaultClient, srv.URL+tc.path, tc.header)
			if resp.StatusCode != tc.want {
				t.Fatalf("GET %s: %s, want %d\n%s", tc.path, resp.Status, tc.want, body)
			}
			if tc.want == http.StatusUnauthorized && !strings.Contains(body, "X-Nomad-Token") {
				t.Errorf("401 does not say how to send a token: %s", body)
			}
		})
	}
}

func TestHealthHidesTheReasonFromTokensThatDoNotSeeEverything(t *testing.T) {
	srv := newTestAPI(t)
	for token, wantSecret := range map[string]bool{"": false, "team-b-reader": false, "mgmt": true} {
		_, body := get(t, http.DefaultClient, srv.URL+"/v1/health", map[string]string{"X-Nomad-Token": token})
		if got := strings.Contains(body, "secret-train"); got != wantSecret {
			t.Errorf("token %q: health names the failing job: %v, want %v\n%s", token, got, wantSecret, body)
		}
		if !strings.Contains(body, `"ok": false`) {
			t.Errorf("token %q: health does not say it is not ok:\n%s", token, body)
		}
	}
}

func TestATokenSeesOnlyItsNamespaces(t *testing.T) {
	srv := newTestAPI(t)
	_, body := get(t, http.DefaultClient, srv.URL+"/v1/status", map[string]string{"X-Nomad-Token": "team-b-reader"})
	var st statusResponse
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	var projects, suspended, recent []string
	for _, p := range st.Projects {
		projects = append(projects, p.Project)
	}
	for _, j := range st.Suspended {
		suspended = append(suspended, j.Namespace+"/"+j.Job)
	}
	for _, e := range st.Recent {
		recent = append(recent, e.Namespace+"/"+e.Job)
	}
	for what, got := range map[string][]string{"projects": projects, "pending": st.Pending, "suspended": suspended, "recent": recent} {
		want := map[string][]string{"projects": {"team-b"}, "pending": {"team-b/sweep/main"}, "suspended": {"team-b/infer"}, "recent": {"team-b/infer"}}[what]
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	for _, leak := range []string{"team-a/train", "secret", "node n2"} {
		if strings.Contains(body, leak) {
			t.Errorf("team-b's reader sees %q:\n%s", leak, body)
		}
	}
	if !strings.Contains(body, "team-b/big: its record would exceed") {
		t.Errorf("team-b's reader does not see why team-b/big is never suspended:\n%s", body)
	}
	if !strings.Contains(body, hiddenWorkload) {
		t.Errorf("the reason of team-b's suspension does not say a hidden workload needed room:\n%s", body)
	}
	if st.Access == nil || st.Access.All || !slices.Equal(st.Access.Namespaces, []string{"team-b"}) {
		t.Errorf("access %+v, want namespaces [team-b]", st.Access)
	}

	_, body = get(t, http.DefaultClient, srv.URL+"/v1/status", map[string]string{"X-Nomad-Token": "mgmt"})
	for _, want := range []string{"team-a/train/main", "node n2: draining", "job team-a/secret: bad spec"} {
		if !strings.Contains(body, want) {
			t.Errorf("a management token does not see %q", want)
		}
	}
}

// TestDashboardLogin: without a token the dashboard sends a person to the
// login form; a token Nomad rejects is refused there; a good one is kept
// in an HttpOnly, SameSite cookie that then authorizes the page's reads;
// logging out clears it; a login posted from another site is refused.
func TestDashboardLogin(t *testing.T) {
	srv := newTestAPI(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, _ := get(t, noRedirect, srv.URL+"/", nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
		t.Fatalf("GET / without a token: %s to %q, want 303 to /login", resp.Status, resp.Header.Get("Location"))
	}
	post := func(path string, form url.Values, origin string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	if resp, body := post("/login", url.Values{"token": {"nope"}}, srv.URL); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "rejected by Nomad") {
		t.Errorf("login with a bad token: %s\n%s", resp.Status, body)
	}
	if resp, _ := post("/login", url.Values{"token": {"mgmt"}}, "http://evil.example"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site login: %s, want 403", resp.Status)
	}
	resp, _ = post("/login", url.Values{"token": {"team-b-reader"}}, srv.URL)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %s to %q, want 303 to /", resp.Status, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == tokenCookie {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Value != "team-b-reader" {
		t.Fatalf("login cookie %+v, want HttpOnly, SameSite=Strict, holding the token", cookie)
	}
	withCookie := map[string]string{"Cookie": cookie.String()}
	if resp, body := get(t, noRedirect, srv.URL+"/", withCookie); resp.StatusCode != http.StatusOK || strings.Contains(body, "http-equiv") {
		t.Errorf("dashboard with the cookie: %s (a meta refresh would reload the page)\n%s", resp.Status, body)
	}
	if resp, body := get(t, noRedirect, srv.URL+"/v1/status", withCookie); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"login": true`) {
		t.Errorf("status with the cookie: %s\n%s", resp.Status, body)
	}
	resp, _ = post("/logout", nil, srv.URL)
	for _, c := range resp.Cookies() {
		if c.Name == tokenCookie && (c.MaxAge >= 0 || c.Value != "") {
			t.Errorf("logout left the cookie %+v", c)
		}
	}
}

// TestGPUMapFollowsTheToken: the GPU map needs node read; with it, the
// jobs of namespaces the token cannot read are hidden, tenants and guests
// alike, their project and shares kept.
func TestGPUMapFollowsTheToken(t *testing.T) {
	srv := newTestAPI(t)
	for token, want := range map[string][]string{
		"team-b-reader":   nil,
		"team-b-operator": {"team-b/infer 50", hiddenWorkload + " 100", hiddenWorkload + " 25", "guest team-b/infer 50", "guest " + hiddenWorkload + " 25"},
		"mgmt":            {"team-a/secret-train 100", "team-b/infer 50", "team-a/secret-nb 25", "guest team-b/infer 50", "guest team-a/secret-nb 25"},
	} {
		_, body := get(t, http.DefaultClient, srv.URL+"/v1/status", map[string]string{"X-Nomad-Token": token})
		var st service.Status
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range st.Nodes {
			for _, g := range n.GPUs {
				for _, tn := range g.Tenants {
					got = append(got, fmt.Sprintf("%s %d", tenantName(tn), tn.Shares))
				}
				for _, tn := range g.Guests {
					got = append(got, fmt.Sprintf("guest %s %d", tenantName(tn), tn.Shares))
				}
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s sees the GPU map's tenants %q, want %q", token, got, want)
		}
	}
}

func tenantName(tn service.Tenant) string {
	if tn.Namespace != "" {
		return tn.Namespace + "/" + tn.Job
	}
	return tn.Job
}

func ptr[T any](v T) *T { return &v }

// TestTrendFollowsTheToken: a token sees the trend of the projects it sees.
func TestTrendFollowsTheToken(t *testing.T) {
	srv := newTestAPI(t)
	_, body := get(t, http.DefaultClient, srv.URL+"/v1/status", map[string]string{"X-Nomad-Token": "team-b-reader"})
	var st service.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Trend) != 2 || len(st.Trend[1].Projects) != 1 || st.Trend[1].Projects["team-b"].Allocated != 0.5 {
		t.Fatalf("team-b's reader sees the trend %+v, want team-b's two samples alone", st.Trend)
	}
}

func TestWithoutAccessControlEverythingIsVisible(t *testing.T) {
	srv := httptest.NewServer(Handler(fakeSource{health: service.Health{OK: true}}, prometheus.NewRegistry()))
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, want := range map[string]string{"/v1/status": "team-a/train/main", "/": "dashboard.js", "/login": ""} {
		resp, body := get(t, noRedirect, srv.URL+path, nil)
		if path == "/login" {
			if resp.StatusCode != http.StatusSeeOther {
				t.Errorf("GET /login without ACLs: %s, want a redirect to the dashboard", resp.Status)
			}
			continue
		}
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: %s, body lacks %q", path, resp.Status, want)
		}
	}
}

func TestHideWorkload(t *testing.T) {
	a := Access{Namespaces: map[string]bool{"team-b": true}}
	for _, tc := range []struct{ reason, workload, wantReason, wantWorkload string }{
		{"makes room for team-a/j/g on n1", "team-a/j/g", "makes room for " + hiddenWorkload + " on n1", ""},
		{"makes room for team-b/j/g on n1", "team-b/j/g", "makes room for team-b/j/g on n1", "team-b/j/g"},
		{"project at its limit", "", "project at its limit", ""},
	} {
		r, w := hideWorkload(tc.reason, tc.workload, a)
		if r != tc.wantReason || w != tc.wantWorkload {
			t.Errorf("hideWorkload(%q, %q) = %q, %q; want %q, %q", tc.reason, tc.workload, r, w, tc.wantReason, tc.wantWorkload)
		}
	}
}
