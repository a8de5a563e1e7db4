// Command soak runs the chaos soak of package internal/soak against a
// fresh local cluster (`make soak`): random GPU work, owner actions,
// quota edits and faults for -duration, with the invariants checked
// throughout. It prints the event history as it goes and ends with the
// summary line; it exits 1 on any violation.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/soak"
)

func main() {
	duration := flag.Duration("duration", 30*time.Minute, "the chaos phase's length (a settle phase of -restore-bound plus 15 s follows)")
	seed := flag.Int64("seed", 1, "seed of the driver's and the fault injector's choices")
	clients := flag.Int("clients", 2, "Nomad client nodes")
	gpus := flag.Int("gpus", 4, "simulated GPUs per client node")
	bound := flag.Duration("restore-bound", 60*time.Second, "how long a project under its guarantee with placeable waiting work may wait after the last disturbance")
	faults := flag.String("faults", "", "comma-separated fault kinds to inject (empty: all of "+strings.Join(soak.FaultKinds(), ",")+")")
	every := flag.Duration("fault-every", 12*time.Second, "mean time between faults")
	dir := flag.String("dir", "", "directory for the agents and logs (empty: a temporary one, removed)")
	avoid := flag.String("avoid", "", "comma-separated known findings whose trigger the driver leaves out (of "+soak.FindingScaleSuspended+")")
	serviceLog := flag.String("service-log-level", "info", "the quota-service instances' -log-level (debug logs every cycle's plan)")
	quiet := flag.Bool("quiet", false, "print only violations and the summary")
	flag.Parse()
	cfg := soak.Config{Seed: *seed, Duration: *duration, Clients: *clients, GPUs: *gpus, RestoreBound: *bound, ServiceLogLevel: *serviceLog,
		FaultEvery: *every, Dir: *dir}
	if *faults != "" {
		cfg.Faults = strings.Split(*faults, ",")
	}
	if *avoid != "" {
		cfg.Avoid = strings.Split(*avoid, ",")
	}
	if !*quiet {
		cfg.Out = os.Stdout
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := soak.Run(ctx, cfg)
	if *quiet && res.Report != "" {
		fmt.Println(res.Report)
	}
	for _, v := range res.Violations {
		fmt.Println("violation:", v)
	}
	fmt.Println(res.Summary())
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if len(res.Violations) > 0 {
		os.Exit(1)
	}
}
