package demo

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/browser"
	"github.com/gpushare/nomad-gpushare/internal/localcluster"
)

// TestDashboardInBrowser opens the dashboards of both quota service
// instances of the demo, with ACLs on, in headless Chromium, logs in with
// a Nomad token through the login form, and plays the reclaim story
// (jobspecs/demo/reclaim): project default borrows a GPU, then research
// asks for its guaranteed two. Both pages, never reloaded, come to show
// what a person needs: every project with its guaranteed, deserved and
// allocated GPUs, the jobs the service suspended with the recorded
// reasons, and those suspensions in the recent actions; one page is the
// leader's, the other the standby's. The test fails, not skips, without
// Chromium: CI installs it.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs real agents; run without -short")
	}
	if _, err := browser.Find(); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	ready := make(chan *localcluster.Cluster, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{RepoRoot: root, Dir: t.TempDir(), Out: &out, ACL: true,
			Ready: func(c *localcluster.Cluster) { ready <- c }})
	}()
	defer func() {
		cancel()
		<-done
	}()
	var c *localcluster.Cluster
	select {
	case c = <-ready:
	case err := <-done:
		t.Fatalf("demo ended before it was up: %v\n%s", err, out.String())
	case <-time.After(4 * time.Minute):
		t.Fatalf("demo not up after 4 minutes:\n%s", out.String())
	}
	urls, err := quotaInstances(ctx, c.Consul, 2, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(t.TempDir(), "dashboard.png")
	story, err := runReclaimStory(ctx, c, root, urls, shot)
	if err != nil {
		t.Fatal(err)
	}

	checkProjects(t, "before the story", story.Before, map[string]string{"default": "2.00", "research": "2.00"})
	roles := map[string]int{}
	for i, d := range story.After {
		checkProjects(t, urls[i], d, map[string]string{"default": "2.00", "research": "2.00"})
		if d.LoadMark != loadMark || d.MetaRefresh {
			t.Errorf("%s: the page was reloaded (mark %q, meta refresh %v): it must redraw itself from /v1/status", urls[i], d.LoadMark, d.MetaRefresh)
		}
		if d.Error != "" {
			t.Errorf("%s shows an error: %s", urls[i], d.Error)
		}
		for _, role := range []string{"(leader)", "(standby)"} {
			if strings.Contains(d.Summary, role) {
				roles[role]++
			}
		}
		research := row(d.Projects, "Project", "research")
		if research["Allocated"] != "2.00" {
			t.Errorf("%s: research allocated %q after the reclaim, want 2.00", urls[i], research["Allocated"])
		}
		if n := row(d.Projects, "Project", "default")["Suspended jobs"]; n != strconv.Itoa(len(story.Records)) {
			t.Errorf("%s: default counts %s suspended jobs, the service recorded %d", urls[i], n, len(story.Records))
		}
	}
	if roles["(leader)"] != 1 || roles["(standby)"] != 1 {
		t.Errorf("pages say %v, want one leader and one standby", roles)
	}
	png, err := os.ReadFile(shot)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) || len(png) < 10000 {
		t.Errorf("screenshot %s: %d bytes, %v; want a PNG of the page", shot, len(png), err)
	}
	t.Logf("%d jobs of default suspended for research; both dashboards show them", len(story.Records))
}

// checkProjects checks that d shows each project with its guaranteed GPUs
// and a deserved and an allocated amount.
func checkProjects(t *testing.T, where string, d Dashboard, guaranteed map[string]string) {
	t.Helper()
	for p, g := range guaranteed {
		r := row(d.Projects, "Project", p)
		if r == nil {
			t.Errorf("%s: project %s not shown: %v", where, p, d.Projects)
			continue
		}
		if r["Guaranteed"] != g {
			t.Errorf("%s: %s guaranteed %q, want %s", where, p, r["Guaranteed"], g)
		}
		for _, col := range []string{"Deserved", "Allocated"} {
			if _, err := strconv.ParseFloat(r[col], 64); err != nil {
				t.Errorf("%s: %s's %s is %q, want GPUs", where, p, col, r[col])
			}
		}
	}
}

// row is the first row whose column col reads value.
func row(rows []map[string]string, col, value string) map[string]string {
	for _, r := range rows {
		if r[col] == value {
			return r
		}
	}
	return nil
}
