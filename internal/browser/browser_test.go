package browser

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

func TestFindNamesThePackageToInstall(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(EnvBinary, "")
	_, err := Find()
	if err == nil || !strings.Contains(err.Error(), "apt-get install -y chromium") {
		t.Fatalf("Find without Chromium: %v, want the Debian package named", err)
	}
}

// TestScriptRunsInAPage: the browser loads a page from a local server and
// runs its script, which changes the page after load.
func TestScriptRunsInAPage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium; run without -short")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte(`<!doctype html><p id="p">before</p><script>setTimeout(() => { document.getElementById("p").textContent = "after" }, 100)</script>`))
	}))
	defer srv.Close()
	b, err := Start(t.Context(), 800, 600)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := chromedp.Do(b.Ctx, chromedp.Navigate(srv.URL)); err != nil {
		t.Fatal(err)
	}
	got, err := chromedp.Run(b.Ctx, chromedp.Poll[string](`document.getElementById("p").textContent === "after" && "after"`, chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil || got != "after" {
		t.Fatalf("page text %q (%v), want the script's change\n%s", got, err, b.Output())
	}
}
