// Command demo runs the local gpushare demo (`make demo`): Consul, Nomad with
// the device plugin on simulated GPUs, and the example workloads, until
// Ctrl-C. With -acl (`make demo ACL=1`) both agents run with ACLs on and
// the plugin and the quota service on tokens from jobspecs/acl.
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
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	cfg := demo.Config{RepoRoot: root, Dir: filepath.Join(root, ".demo"), Out: os.Stdout, ACL: *acl}
	if err := demo.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
