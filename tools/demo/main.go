// Command demo runs the local gpushare demo (`make demo`): Consul, Nomad with
// the device plugin on simulated GPUs, and the example workloads, until
// Ctrl-C.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/gpushare/nomad-gpushare/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	cfg := demo.Config{RepoRoot: root, Dir: filepath.Join(root, ".demo"), Out: os.Stdout}
	if err := demo.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}
