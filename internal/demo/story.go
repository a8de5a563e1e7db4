package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gpushare/nomad-gpushare/internal/browser"
	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	nomadapi "github.com/hashicorp/nomad/api"
)

// The reclaim story's jobs (jobspecs/demo/reclaim): default borrows a GPU
// with sweep, then research asks for its guaranteed 2 with finetune.
const (
	storyBorrow  = "jobspecs/demo/reclaim/sweep.nomad.hcl"
	storyReclaim = "jobspecs/demo/reclaim/finetune.nomad.hcl"
	// loadMark marks the dashboards before the story: still there after
	// it, the pages were never reloaded.
	loadMark = "loaded before the reclaim"
)

// Story is what the reclaim story showed in the browser.
type Story struct {
	// Records are the suspensions the service made for research, and
	// those of queued jobs it held from the room it made (cause hold).
	Records []state.Suspension
	// Before is the first dashboard, logged in, before the story.
	Before Dashboard
	// After are the dashboards of every instance once they show the
	// suspensions, in the order of the URLs given.
	After []Dashboard
}

// runReclaimStory opens the dashboard of every quota service instance in
// headless Chromium (logging in with the management token when ACLs are
// on), runs the reclaim story, waits until every dashboard shows the
// suspensions the service made with their reasons and in its recent
// actions, without a reload, and writes a screenshot of the first one to
// shot.
func runReclaimStory(ctx context.Context, c *localcluster.Cluster, root string, urls []string, shot string) (*Story, error) {
	b, err := browser.Start(ctx, 1400, 900)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	story := &Story{}
	tabs := make([]context.Context, len(urls))
	for i, url := range urls {
		tab, cancel := chromedp.NewContext(b.Ctx)
		defer cancel()
		tabs[i] = tab
		if err := openDashboard(tab, url+"/", c.NomadToken); err != nil {
			return nil, fmt.Errorf("%w\nbrowser output:\n%s", err, b.Output())
		}
		if err := markLoad(tab, loadMark); err != nil {
			return nil, err
		}
	}
	if story.Before, err = readDashboard(tabs[0]); err != nil {
		return nil, err
	}
	if story.Records, err = reclaim(ctx, c, root); err != nil {
		return nil, err
	}
	for i, tab := range tabs {
		d, err := waitDashboard(tab, 2*time.Minute, func(d Dashboard) error { return showsStory(d, story.Records) })
		if err != nil {
			return nil, fmt.Errorf("dashboard of %s: %w", urls[i], err)
		}
		story.After = append(story.After, d)
	}
	if err := screenshot(tabs[0], shot); err != nil {
		return nil, err
	}
	return story, nil
}

// showReclaim plays the reclaim story on the demo, with the dashboard of
// printed (the address the demo printed) first, and says where its
// screenshot is.
func showReclaim(ctx context.Context, c *localcluster.Cluster, cfg Config, printed string) error {
	urls, err := quotaInstances(ctx, c.Consul, 2, 2*time.Minute)
	if err != nil {
		return err
	}
	if i := slices.Index(urls, printed); i > 0 {
		urls[0], urls[i] = urls[i], urls[0]
	}
	fmt.Fprintf(cfg.Out, "\nreclaim story: %s borrows a GPU for project default, then %s asks for research's guaranteed 2\n", storyBorrow, storyReclaim)
	story, err := runReclaimStory(ctx, c, cfg.RepoRoot, urls, cfg.Screenshot)
	if err != nil {
		return err
	}
	var jobs []string
	for _, r := range story.Records {
		jobs = append(jobs, r.Namespace+"/"+r.Job)
	}
	fmt.Fprintf(cfg.Out, "suspended for research: %s\nScreenshot: %s (the dashboard at %s)\n", strings.Join(jobs, ", "), cfg.Screenshot, urls[0])
	return nil
}

// showsStory checks that d shows research holding its guaranteed 2 GPUs,
// lists exactly the recorded suspensions with their reasons, and shows a
// suspend action for each in its recent actions.
func showsStory(d Dashboard, recs []state.Suspension) error {
	for _, p := range d.Projects {
		if p["Project"] == "research" && p["Allocated"] != "2.00" {
			return fmt.Errorf("research allocated %q, want 2.00", p["Allocated"])
		}
	}
	var shown, want []string
	for _, row := range d.Suspended {
		shown = append(shown, row["Job"]+": "+row["Reason"])
	}
	for _, r := range recs {
		want = append(want, r.Namespace+"/"+r.Job+": "+strings.Join(strings.Fields(r.Reason), " "))
	}
	slices.Sort(shown)
	slices.Sort(want)
	if !slices.Equal(shown, want) {
		return fmt.Errorf("suspended jobs shown:\n  %s\nrecorded:\n  %s", strings.Join(shown, "\n  "), strings.Join(want, "\n  "))
	}
	for _, r := range recs {
		if !slices.ContainsFunc(d.Recent, func(row map[string]string) bool {
			return row["Action"] == string(state.EventSuspend) && row["Job"] == r.Namespace+"/"+r.Job
		}) {
			return fmt.Errorf("recent actions show no suspension of %s/%s: %v", r.Namespace, r.Job, d.Recent)
		}
	}
	return nil
}

// reclaim submits the story's jobs and returns the suspensions the
// service recorded once research's finetune runs.
func reclaim(ctx context.Context, c *localcluster.Cluster, root string) ([]state.Suspension, error) {
	if err := submitAndWait(ctx, c, root, storyBorrow, nil); err != nil {
		return nil, err
	}
	store := state.New(c.Consul, kvlayout.New(kvlayout.DefaultRoot))
	store.Keys = &recordkey.Variable{Client: c.Nomad, Namespace: "default", Path: service.DefaultRecordKeyPath}
	var recs []state.Suspension
	err := submitAndWait(ctx, c, root, storyReclaim, func() error {
		all, err := store.Suspensions(ctx)
		if err != nil {
			return err
		}
		recs = nil
		forResearch := false
		for _, r := range all.Verified {
			if r.Phase == state.PhaseSuspended && (r.ForProject == "research" || r.Cause == plan.CauseHold.String()) {
				recs = append(recs, r)
				forResearch = forResearch || r.ForProject == "research"
			}
		}
		if !forResearch {
			return errors.New("no suspension recorded for research")
		}
		return nil
	})
	return recs, err
}

// submitAndWait registers the job in file and waits until all its
// allocations run and done (if any) accepts.
func submitAndWait(ctx context.Context, c *localcluster.Cluster, root, file string, done func() error) error {
	src, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return fmt.Errorf("reading %s: %w", file, err)
	}
	job, err := c.Nomad.Jobs().ParseHCL(string(src), true)
	if err != nil {
		return fmt.Errorf("parsing %s: %w", file, err)
	}
	if _, _, err := c.Nomad.Jobs().Register(job, nil); err != nil {
		return fmt.Errorf("submitting %s: %w", file, err)
	}
	want := 0
	for _, tg := range job.TaskGroups {
		want += *tg.Count
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := running(c.Nomad, *job.Namespace, *job.ID, want)
		if err == nil && done != nil {
			err = done()
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not done after 3 minutes: %w", file, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// running checks that want allocations of the job run.
func running(nomad *nomadapi.Client, ns, id string, want int) error {
	sum, _, err := nomad.Jobs().Summary(id, &nomadapi.QueryOptions{Namespace: ns})
	if err != nil {
		return err
	}
	n := 0
	for _, s := range sum.Summary {
		n += s.Running
	}
	if n < want {
		return fmt.Errorf("%s/%s: %d of %d allocations run", ns, id, n, want)
	}
	return nil
}
