package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/placement"
	"github.com/gpushare/nomad-gpushare/scheduler/sim"
	"github.com/gpushare/nomad-gpushare/scheduler/trace"
)

// runTable prints the variant table: for each family (a variant name, or
// "default" for the pod list as it is), over every variant seed and run
// seed, the mean unallocated GPU % of the baseline and of the policy, the
// ratio of the means, the worst ratio of one run (variant seed and run
// seed) and the offline reference (sim.Offline with the bound policy).
func runTable(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tracesim table", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodesPath := fs.String("nodes", "", "node list CSV")
	podsPath := fs.String("pods", "", "pod list CSV the variants are drawn from")
	families := fs.String("families", "default,gpushare60,multigpu30", "comma-separated variant names; default is the pod list as it is")
	variantSeeds := fs.String("variant-seeds", "1-3", "seeds of the variants' draws: a range A-B or a list")
	seedSpec := fs.String("seeds", "42-43", "run seeds: a range A-B or a list")
	policy := fs.String("policy", "gpushare", "the policy compared")
	baseline := fs.String("baseline", "fgd", "the policy it is compared with")
	bound := fs.String("bound", "gpushare", "the policy that places the offline reference's sorted tasks (none: no reference)")
	parallel := fs.Int("parallel", 1, "runs simulated at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nodesPath == "" || *podsPath == "" {
		return errors.New("table: -nodes and -pods are required")
	}
	if *parallel < 1 {
		return fmt.Errorf("table: -parallel %d: must be at least 1", *parallel)
	}
	vseeds, err := parseSeeds(*variantSeeds)
	if err != nil {
		return err
	}
	seeds, err := parseSeeds(*seedSpec)
	if err != nil {
		return err
	}
	if _, err := parsePolicies(*policy + "," + *baseline); err != nil {
		return err
	}
	if *bound != "none" {
		if _, err := parsePolicies(*bound); err != nil {
			return err
		}
	}
	nodes, err := trace.OpenNodes(*nodesPath)
	if err != nil {
		return err
	}
	base, err := trace.OpenTasks(*podsPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "| family | %s | %s | ratio of means | worst run | offline (%s) |\n", *baseline, *policy, *bound)
	fmt.Fprintln(stdout, "| --- | --- | --- | --- | --- | --- |")
	for fam := range strings.SplitSeq(*families, ",") {
		fam = strings.TrimSpace(fam)
		row, err := familyRow(nodes, base, fam, vseeds, seeds, *policy, *baseline, *bound, *parallel)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, row)
	}
	return nil
}

// familyRow simulates one family and formats its table row.
func familyRow(nodes []placement.Node, base []trace.Task, fam string, vseeds, seeds []int64,
	policy, baseline, bound string, parallel int) (string, error) {
	var variant trace.Variant
	if fam != "default" {
		v, err := trace.ParseVariant(fam)
		if err != nil {
			return "", err
		}
		variant = v
	} else {
		vseeds = vseeds[:1]
	}
	var sumP, sumB, sumO, worst float64
	runs := 0
	for _, vs := range vseeds {
		tasks, err := variantTasks(base, nodes, variant, vs)
		if err != nil {
			return "", err
		}
		w := placement.NewWorkload(tasks, placement.DefaultCoverage)
		pr, err := runSeeds(nodes, tasks, policyMaker(policy, w, nil), seeds, parallel)
		if err != nil {
			return "", err
		}
		br, err := runSeeds(nodes, tasks, policyMaker(baseline, w, nil), seeds, parallel)
		if err != nil {
			return "", err
		}
		for i := range seeds {
			sumP += pr[i].UnallocAtRead
			sumB += br[i].UnallocAtRead
			if br[i].UnallocAtRead > 0 {
				worst = max(worst, pr[i].UnallocAtRead/br[i].UnallocAtRead)
			}
			runs++
		}
		if bound == "none" {
			continue
		}
		for _, seed := range seeds {
			p, err := policyMaker(bound, w, nil)(seed)
			if err != nil {
				return "", err
			}
			r, err := sim.Offline(sim.Config{Nodes: nodes, Tasks: tasks, Policy: p, Seed: seed})
			if err != nil {
				return "", err
			}
			sumO += r.UnallocAtRead
		}
	}
	n := float64(runs)
	offline := "-"
	if bound != "none" {
		offline = fmt.Sprintf("%.2f", sumO/n)
	}
	ratio := 0.0
	if sumB > 0 {
		ratio = sumP / sumB
	}
	return fmt.Sprintf("| %s | %.2f | %.2f | %.3f | %.3f | %s |", fam, sumB/n, sumP/n, ratio, worst, offline), nil
}

// variantTasks draws variant v (none: base as it is) with seed.
func variantTasks(base []trace.Task, nodes []placement.Node, v trace.Variant, seed int64) ([]placement.Task, error) {
	tt := base
	if v != nil {
		var err error
		if tt, err = v.Apply(base, nodes, seed); err != nil {
			return nil, err
		}
	}
	tasks := make([]placement.Task, len(tt))
	for i, t := range tt {
		tasks[i] = t.Task
	}
	return tasks, nil
}
