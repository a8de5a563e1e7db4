package demo

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

// Dashboard is what a person sees on the quota service's dashboard: the
// rendered text of its summary line, its tables (each row by column
// title) and its waiting list.
type Dashboard struct {
	Summary   string              `json:"summary"`
	Error     string              `json:"error"`
	Projects  []map[string]string `json:"projects"`
	Suspended []map[string]string `json:"suspended"`
	Recent    []map[string]string `json:"recent"`
	Waiting   []string            `json:"waiting"`
	// LoadMark is window.gpushareLoadMark: set once by markLoad, it is
	// gone if the page was loaded again since.
	LoadMark string `json:"load_mark"`
	// MetaRefresh: the page carries a <meta http-equiv> (a reload timer).
	MetaRefresh bool `json:"meta_refresh"`
}

// readDashboardJS reads the page as rendered (innerText: what is shown).
const readDashboardJS = `(() => {
  const table = id => {
    const t = document.getElementById(id);
    const head = t.tHead.rows.length ? [...t.tHead.rows[0].cells].map(c => c.innerText.trim()) : [];
    return [...t.tBodies[0].rows].filter(r => !r.querySelector("td.empty"))
      .map(r => Object.fromEntries([...r.cells].map((c, i) => [head[i], c.innerText.trim()])));
  };
  const error = document.getElementById("error");
  return {
    summary: document.getElementById("summary").innerText.trim(),
    error: error.hidden ? "" : error.innerText.trim(),
    projects: table("projects"),
    suspended: table("suspended"),
    recent: table("recent"),
    waiting: [...document.querySelectorAll("#waiting li:not(.empty)")].map(li => li.innerText.trim()),
    load_mark: window.gpushareLoadMark || "",
    meta_refresh: document.querySelector("meta[http-equiv]") !== null,
  };
})()`

// readDashboard reads the dashboard in the tab ctx.
func readDashboard(ctx context.Context) (Dashboard, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[Dashboard](readDashboardJS))
}

// openDashboard opens url in the tab ctx, logs in with token when the
// service asks for one (Nomad's ACLs on), and waits until the page shows
// its projects.
func openDashboard(ctx context.Context, url, token string) error {
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		return fmt.Errorf("opening %s: %w", url, err)
	}
	loc, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil {
		return err
	}
	if strings.HasSuffix(loc, "/login") {
		if token == "" {
			return fmt.Errorf("%s asks for a Nomad token and none was given", url)
		}
		step, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(step, chromedp.SetValue(chromedp.ID("token"), token), chromedp.Submit(chromedp.ID("token"))); err != nil {
			return fmt.Errorf("logging in at %s: %w", loc, err)
		}
	}
	_, err = waitDashboard(ctx, time.Minute, func(d Dashboard) error {
		if len(d.Projects) == 0 {
			return fmt.Errorf("no project shown yet (%q)", d.Summary)
		}
		return nil
	})
	if err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
		return fmt.Errorf("%w; the page shows:\n%s", err, text)
	}
	return nil
}

// markLoad marks the page; the mark survives only while it is not
// reloaded.
func markLoad(ctx context.Context, mark string) error {
	_, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf("window.gpushareLoadMark = %q", mark)))
	return err
}

// waitDashboard reads the page until cond accepts it, and fails with
// cond's last complaint after timeout.
func waitDashboard(ctx context.Context, timeout time.Duration, cond func(Dashboard) error) (Dashboard, error) {
	deadline := time.Now().Add(timeout)
	for {
		d, err := readDashboard(ctx)
		if err == nil {
			if err = cond(d); err == nil {
				return d, nil
			}
		}
		if time.Now().After(deadline) {
			return d, fmt.Errorf("dashboard after %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return d, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// screenshot writes a PNG of the whole page in the tab ctx to path.
func screenshot(ctx context.Context, path string) error {
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return fmt.Errorf("taking the screenshot: %w", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		return fmt.Errorf("writing the screenshot: %w", err)
	}
	return nil
}
