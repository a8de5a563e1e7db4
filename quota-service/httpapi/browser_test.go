package httpapi

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gpushare/nomad-gpushare/internal/browser"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/prometheus/client_golang/prometheus"
)

// changingSource is fakeSource whose recent actions can grow.
type changingSource struct {
	fakeSource
	mu    sync.Mutex
	extra []state.Entry
}

func (c *changingSource) Status() service.Status {
	st := c.fakeSource.Status()
	c.mu.Lock()
	defer c.mu.Unlock()
	st.Recent = append(append([]state.Entry(nil), c.extra...), st.Recent...)
	return st
}

// Utilization reports each project's use: team-a's memory 0.91 GPU,
// team-b's 0.37.
func (c *changingSource) Utilization() *service.Utilization {
	line := func(project string, allocated, used float64) service.ProjectUtilization {
		var p service.ProjectUtilization
		p.Project, p.Guaranteed, p.Allocated, p.UsedMemory, p.Tenants = project, "2.00", allocated, used, 1
		return p
	}
	return &service.Utilization{At: time.Now(), Nodes: 2,
		Projects: []service.ProjectUtilization{line("team-a", 2, 0.91), line("team-b", 1, 0.37)}}
}

func (c *changingSource) add(e state.Entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.extra = append(c.extra, e)
}

// pageText polls until the page's text (what a person sees) contains
// want, and returns it.
func pageText(ctx context.Context, want string) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		if err == nil && strings.Contains(text, want) {
			return text, nil
		}
		if time.Now().After(deadline) {
			return text, fmt.Errorf("page does not show %q after 30s (%v):\n%s", want, err, text)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestLoginAndRefreshInBrowser drives the dashboard in headless Chromium
// with Nomad's ACLs on: the page sends a person to the login form; a token
// Nomad rejects is refused with the reason; with team-b's reader the page
// shows team-b alone and says so; a new action appears without a reload;
// logging out leads back to the form.
func TestLoginAndRefreshInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium; run without -short")
	}
	src := &changingSource{fakeSource: fakeSource{health: service.Health{OK: true}}}
	srv := httptest.NewServer(New(Config{Source: src, Registry: prometheus.NewRegistry(), Access: fakeAccess{}}))
	defer srv.Close()
	b, err := browser.Start(t.Context(), 1200, 800)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := b.Ctx
	login := func(token string) error {
		return chromedp.Do(ctx, chromedp.SetValue(chromedp.ID("token"), token), chromedp.Submit(chromedp.ID("token")))
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	if _, err := pageText(ctx, "Log in with a Nomad token"); err != nil {
		t.Fatal(err)
	}
	if err := login("nope"); err != nil {
		t.Fatal(err)
	}
	if _, err := pageText(ctx, "rejected by Nomad"); err != nil {
		t.Fatal(err)
	}
	if err := login("team-b-reader"); err != nil {
		t.Fatal(err)
	}
	// The utilization table comes from a second request after the
	// status: wait for it, the last part drawn.
	text, err := pageText(ctx, "0.37")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"team-b/infer", hiddenWorkload, "team-b/ddp (team-b): 2 of 3 running", "team-b/serve (team-b): replicas runs 2 of 4", "1.50 (surplus x0.50)", "Log out", "Utilization vs allocation", "0.37", "Allocated and used, last hour", "allocated 0.50, used 0.50"} {
		if !strings.Contains(text, want) {
			t.Errorf("page lacks %q:\n%s", want, text)
		}
	}
	// Project names are no secret (the metrics carry them); job names
	// are.
	for _, leak := range []string{"team-a/", "secret", "0.91"} {
		if strings.Contains(text, leak) {
			t.Errorf("team-b's reader sees %q:\n%s", leak, text)
		}
	}
	lines, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.querySelectorAll("#trend svg polyline").length`))
	if err != nil || lines != 2 {
		t.Errorf("team-b's trend draws %v lines (%v), want allocated and used", lines, err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.mark = "no reload"`)); err != nil {
		t.Fatal(err)
	}
	src.add(state.Entry{Time: time.Now(), Event: state.EventResume, Namespace: "team-b", Job: "infer", Reason: "room again"})
	if _, err := pageText(ctx, "room again"); err != nil {
		t.Fatal(err)
	}
	if mark, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.mark || ""`)); err != nil || mark != "no reload" {
		t.Errorf("the page was reloaded to show the new action (mark %q, %v)", mark, err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#logout button"))); err != nil {
		t.Fatal(err)
	}
	if _, err := pageText(ctx, "Log in with a Nomad token"); err != nil {
		t.Fatal(err)
	}
	checkGPUMap(t, ctx, login)
}

// checkGPUMap logs in with node read: the page draws the GPU map, one box
// per GPU with its family, the part held, its memory, its tenants with
// what they use and borrow, and its guests; team-a's jobs hidden from
// team-b's operator.
func checkGPUMap(t *testing.T, ctx context.Context, login func(string) error) {
	t.Helper()
	if err := login("team-b-operator"); err != nil {
		t.Fatal(err)
	}
	text, err := pageText(ctx, "GPU map")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"GPU 0 · whole", "GPU 1 · shared", "50% held", hiddenWorkload + " (team-a) 100%",
		"team-b/infer (team-b) 50% · uses 60.0 GiB (request 40.0 GiB, limit 80.0 GiB) · borrows 20.0 GiB · runs as a guest on GPU 2",
		"GPU 2 · idle", "memory 70.0 GiB of 80.0 GiB", "guest: team-b/infer (team-b) from GPU 1 · uses 60.0 GiB",
		"guest: " + hiddenWorkload + " (team-a) from GPU 3 · uses 10.0 GiB (request 20.0 GiB, limit 40.0 GiB)"} {
		if !strings.Contains(text, want) {
			t.Errorf("GPU map lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "secret") {
		t.Errorf("team-b's operator sees team-a's job on the GPU map:\n%s", text)
	}
	boxes, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.querySelectorAll("#gpu-map .gpu").length`))
	if err != nil || boxes != 4 {
		t.Errorf("GPU map draws %v boxes (%v), want 4", boxes, err)
	}
	width, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelectorAll("#gpu-map .gpu > .bar > .fill")[1].style.width`))
	if err != nil || width != "50%" {
		t.Errorf("GPU 1's bar is %q wide (%v), want 50%%", width, err)
	}
}
