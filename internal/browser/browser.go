// Package browser starts headless Chromium (Debian's chromium package)
// and drives it with chromedp, for the dashboard's browser test and the
// demo's screenshot. Each Browser has a fresh profile and is started with
// flags that work as root in a container and make it talk to no one but
// the pages it is sent to.
package browser

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"

	"github.com/chromedp/chromedp"
)

// EnvBinary names a Chromium binary to use instead of the one on PATH.
const EnvBinary = "GPUSHARE_CHROMIUM"

// ErrNoChromium says how to get a browser.
var ErrNoChromium = errors.New("headless Chromium not found: install Debian's chromium package (apt-get install -y chromium), or set " + EnvBinary + " to a Chromium or Chrome binary")

// Find returns the Chromium binary: $GPUSHARE_CHROMIUM, else chromium,
// chromium-browser or google-chrome on PATH.
func Find() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvBinary, p, err)
		}
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoChromium
}

// Browser is one headless Chromium.
type Browser struct {
	// Ctx is its first tab's context, for chromedp.Run.
	Ctx     context.Context
	cancels []context.CancelFunc
	dir     string
	out     *output
}

// output collects the browser's stdout and stderr.
type output struct {
	mu sync.Mutex
	b  strings.Builder
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// Start starts a headless Chromium with a fresh profile, a window of
// width x height, and a first tab; Close stops it and removes the profile.
func Start(ctx context.Context, width, height int) (*Browser, error) {
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gpushare-chromium-")
	if err != nil {
		return nil, fmt.Errorf("creating a Chromium profile directory: %w", err)
	}
	out := &output{}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(width, height),
		chromedp.CombinedOutput(out),
	}
	for _, f := range []string{"headless", "no-sandbox", "disable-gpu", "disable-quic", "no-first-run",
		"disable-background-networking", "disable-component-update", "disable-sync", "disable-dev-shm-usage",
		"disable-extensions", "disable-default-apps", "no-default-browser-check", "hide-scrollbars", "mute-audio",
		"disable-breakpad", "metrics-recording-only", "password-store=basic", "use-mock-keychain"} {
		name, value, ok := strings.Cut(f, "=")
		if ok {
			opts = append(opts, chromedp.Flag(name, value))
		} else {
			opts = append(opts, chromedp.Flag(name, true))
		}
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tabCtx, cancelTab := chromedp.NewContext(allocCtx)
	b := &Browser{Ctx: tabCtx, cancels: []context.CancelFunc{cancelTab, cancelAlloc}, dir: dir, out: out}
	// The first Run starts the browser.
	if err := chromedp.Do(tabCtx); err != nil {
		b.Close()
		return nil, fmt.Errorf("starting %s: %w\n%s", bin, err, b.Output())
	}
	return b, nil
}

// Output is what the browser printed (for failure messages).
func (b *Browser) Output() string { return b.out.String() }

// Close stops the browser and removes its profile.
func (b *Browser) Close() {
	for _, c := range b.cancels {
		c()
	}
	os.RemoveAll(b.dir)
}
