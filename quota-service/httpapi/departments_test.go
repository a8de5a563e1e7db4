package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/gpushare/nomad-gpushare/internal/browser"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/prometheus/client_golang/prometheus"
)

// departmentSource: department research holds team-a and team-b,
// department ops holds team-c alone, team-d is on its own.
type departmentSource struct{ fakeSource }

func (departmentSource) Status() service.Status {
	project := func(name, dep string) service.ProjectView {
		return service.ProjectView{ProjectStatus: state.ProjectStatus{Project: name, Guaranteed: "1.00"}, Namespace: name, Department: dep}
	}
	return service.Status{
		Projects: []service.ProjectView{project("team-a", "research"), project("team-b", "research"), project("team-c", "ops"), project("team-d", "")},
		Departments: []service.DepartmentView{
			{Name: "ops", Guaranteed: "1.00", Demand: "1.00", Deserved: "1.00", Allocated: "1.00", Planned: "1.00", OverQuotaWeight: 1, Projects: []string{"team-c"}},
			{Name: "research", Guaranteed: "3.00", Limit: "4.00", Priority: 2, OverQuotaWeight: 1, Demand: "5.00", Deserved: "3.50", Allocated: "3.00", Planned: "3.50",
				Projects: []string{"team-a", "team-b"}},
		},
	}
}

// TestStatusDepartmentsFollowAccess: a department's totals are shown only
// to a token that may see all of its projects; one that sees some of them
// sees the department's name over those; one that sees none does not see
// the department.
func TestStatusDepartmentsFollowAccess(t *testing.T) {
	srv := newServer(t, departmentSource{})
	tests := []struct {
		token string
		want  string // the departments as name(partial)[projects]:deserved
	}{
		{token: "mgmt", want: "ops[team-c]:1.00 research[team-a team-b]:3.50"},
		{token: "team-b-reader", want: "research(partial)[team-b]:"},
		{token: "team-c-reader", want: "ops[team-c]:1.00"},
		{token: "team-d-reader", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.token, func(t *testing.T) {
			resp, body := get(t, srv.Client(), srv.URL+"/v1/status", map[string]string{"X-Nomad-Token": tt.token})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var st service.Status
			if err := json.Unmarshal([]byte(body), &st); err != nil {
				t.Fatal(err)
			}
			got := ""
			for i, d := range st.Departments {
				if i > 0 {
					got += " "
				}
				got += d.Name
				if d.Partial {
					got += "(partial)"
					if d.Guaranteed != "" || d.Allocated != "" || d.Demand != "" || d.Priority != 0 {
						t.Errorf("partial department %+v shows totals or settings", d)
					}
				}
				got += jsonList(d.Projects) + ":" + d.Deserved
			}
			if got != tt.want {
				t.Fatalf("departments %q, want %q", got, tt.want)
			}
		})
	}
}

func jsonList(xs []string) string {
	out := "["
	for i, x := range xs {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}

// deptAccess adds readers of team-c and of team-d to fakeAccess.
type deptAccess struct{ fakeAccess }

func (d deptAccess) Access(ctx context.Context, token string) (Access, error) {
	for _, ns := range []string{"team-c", "team-d"} {
		if token == ns+"-reader" {
			return Access{Namespaces: map[string]bool{ns: true}}, nil
		}
	}
	return d.fakeAccess.Access(ctx, token)
}

func newServer(t *testing.T, src Source) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(New(Config{Source: src, Registry: prometheus.NewRegistry(), Access: deptAccess{}}))
	t.Cleanup(srv.Close)
	return srv
}

// TestDepartmentTreeInBrowser: the dashboard lists each department's row
// with its totals, its projects under it, and the projects on their own
// last; team-b's reader sees research's name over team-b alone, without
// research's totals or team-a.
func TestDepartmentTreeInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium; run without -short")
	}
	srv := newServer(t, departmentSource{})
	b, err := browser.Start(t.Context(), 1200, 800)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := b.Ctx
	firstCells := `Array.from(document.querySelectorAll("#projects tbody tr")).map(tr => tr.cells[0].innerText + "|" + tr.cells[4].innerText).join("\n")`
	tree := func(token, want string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/login")); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("token"), token), chromedp.Submit(chromedp.ID("token"))); err != nil {
			t.Fatal(err)
		}
		if _, err := pageText(ctx, "Department "); err != nil {
			t.Fatal(err)
		}
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](firstCells))
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s's project table (name|deserved):\n%s\nwant:\n%s", token, got, want)
		}
	}
	tree("mgmt", strings.Join([]string{"Department ops|1.00", "└ team-c|", "Department research|3.50", "└ team-a|", "└ team-b|", "team-d|"}, "\n"))
	tree("team-b-reader", strings.Join([]string{"Department research (totals hidden: your token cannot read all of its projects)|", "└ team-b|"}, "\n"))
}
