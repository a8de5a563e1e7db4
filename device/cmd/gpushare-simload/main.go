// Command gpushare-simload is a GPU workload for simulated GPUs: run as an
// ordinary task (raw_exec), it "allocates" GPU memory and "uses" SM
// compute on the GPU of its NVIDIA_VISIBLE_DEVICES by writing its state to
// the directory that the gpushare plugin's simulated backend reads
// (simulated_process_dir). The backend reports it as an NVML compute
// process with its real PID, so the plugin's per-tenant accounting, its
// kills and its moves act on a real process under a real Nomad.
//
//	gpushare-simload -state-dir DIR [-mib V] [-sm P] [-restart-mib V] [-restart-sm P] [-control FILE] [-require-exclusive]
//
// V is MiB, or "request" / "limit" for the task's GPUSHARE_REQUEST_MIB /
// GPUSHARE_LIMIT_MIB. -restart-mib and -restart-sm apply when the task runs
// again in the same allocation (after a kill); a -control file, while it
// exists, overrides both with its "mib=V sm=P" line. With
// -require-exclusive the process exits with status 3 at start when another
// simulated process is on its GPU (a whole-GPU task checks that it got its
// GPU to itself). It runs until SIGINT or SIGTERM and then removes its
// state.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	var ex exitError
	if errors.As(err, &ex) {
		fmt.Fprintln(os.Stderr, "gpushare-simload:", ex.msg)
		os.Exit(ex.code)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-simload:", err)
		os.Exit(2)
	}
}

// exitError ends the program with a given status.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }
