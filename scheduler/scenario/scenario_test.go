package scenario

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
)

// TestScenarios runs every scenario under testdata with first-fit placement
// and with the bestfit and gpushare policies: each file is one table row
// with its cluster, running work, pending work and expectations; the runs
// with other policies check the placement-independent expectations (see
// Scenario.CheckPolicy).
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.scn"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scenarios under testdata")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			sc, err := Parse(file, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(sc.Expects) == 0 {
				t.Fatal("scenario expects nothing")
			}
			for _, policy := range []string{"firstfit", "bestfit", "gpushare"} {
				t.Run(policy, func(t *testing.T) {
					opts, err := planOptions(policy, sc)
					if err != nil {
						t.Fatal(err)
					}
					out, err := sc.Run(opts)
					if err != nil {
						t.Fatal(err)
					}
					for _, err := range sc.CheckPolicy(out, policy == "firstfit") {
						t.Error(err)
					}
				})
			}
		})
	}
}

// planOptions builds the planner options for a policy: "firstfit" is the
// planner's default; other names go to placement.ByName, with the
// scenario's asks as the expected workload.
func planOptions(policy string, sc *Scenario) (plan.Options, error) {
	if policy == "firstfit" {
		return plan.Options{}, nil
	}
	var tasks []placement.Task
	add := func(a cluster.Ask, n int) {
		t := placement.Task{CPUMilli: a.CPUMilli, MemoryMiB: a.MemoryMiB, Models: a.Models}
		switch {
		case a.WholeGPUs > 0:
			t.GPUCount, t.Shares = a.WholeGPUs, cluster.SharesPerGPU
		case a.Shares > 0:
			t.GPUCount, t.Shares = 1, a.Shares
		}
		for range n {
			tasks = append(tasks, t)
		}
	}
	for _, a := range sc.Initial.Allocations {
		add(a.Ask, 1)
	}
	for _, w := range sc.Initial.Pending {
		add(w.Ask, w.Count)
	}
	for _, a := range sc.Arrivals {
		add(a.Pending.Ask, a.Pending.Count)
	}
	p, err := placement.ByName(policy, 1, placement.WithWorkload(placement.NewWorkload(tasks, placement.DefaultCoverage)))
	return plan.Options{Policy: p}, err
}
