package soak

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestSoakShort is the soak's short run in `make test`: a fixed seed,
// 90 s of random work, owner actions, quota edits and faults on real
// agents (one Nomad server, two client nodes of four simulated GPUs, two
// quota-service instances), then the settle phase. Any violation fails
// it, with the event history around it.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs real agents; run without -short")
	}
	// The known findings stay out of the short run until they are fixed
	// (`make soak` runs them).
	// The instances log every changed plan: a violation's Result.Logs
	// carry them.
	cfg := Config{Seed: 1, Duration: 90 * time.Second, RestoreBound: 60 * time.Second, ServiceLogLevel: "debug"}
	if testing.Verbose() {
		cfg.Out = os.Stdout
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Summary())
	if res.Polls < 30 {
		t.Errorf("the checker completed %d polls, too few to have checked anything", res.Polls)
	}
	if res.Jobs == 0 || res.Faults == 0 {
		t.Errorf("no load: %s", res.Summary())
	}
	// A case of a known finding (a bug the soak found in the quota
	// service, named in knownFinding) is logged, not failed, until it is
	// fixed; any other violation fails.
	for _, k := range res.Known {
		t.Logf("known finding (fix pending in quota-service): %s", k)
	}
	if n := len(res.Violations) - len(res.Known); n > 0 {
		t.Errorf("%d violations:\n%v\nhistory:\n%s\nlogs:\n%s", n, res.Violations, res.Report, res.Logs)
	}
}
