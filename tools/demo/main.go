// Command demo runs the local gpushare demo (`make demo`): Consul, Nomad with
// the device plugin on simulated GPUs, and the example workloads, until
// Ctrl-C. With -acl (`make demo ACL=1`) both agents run with ACLs on and
// the plugin and the quota service on tokens from jobspecs/acl. With
// -screenshot FILE (`make demo-screenshot`) it plays the reclaim story of
// jobspecs/demo/reclaim, writes a PNG of the dashboard as headless
// Chromium shows it, and stops.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/gpushare/nomad-gpushare/internal/demo"
)

func main() {
	acl := flag.Bool("acl", false, "run Consul and Nomad with ACLs on (default deny)")
	shot := flag.String("screenshot", "", "play the reclaim story, write a PNG of the dashboard to this file, and stop")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	cfg := demo.Config{RepoRoot: root, Dir: filepath.Join(root, ".demo"), Out: os.Stdout, ACL: *acl, Screenshot: *shot}
	if *shot != "" && !filepath.IsAbs(*shot) {
		cfg.Screenshot = filepath.Join(root, *shot)
	}
	if err := demo.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
