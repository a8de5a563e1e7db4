package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/placement"
	"github.com/gpushare/nomad-gpushare/scheduler/trace"
)

// runTable prints the variant table: for each family (a variant name, or
// "default" for the pod list as it is), over every variant seed and run
// seed, the mean unallocated GPU % of the baseline, then for each policy
// its mean, the ratio of the means to the baseline's and the worst ratio
// of one run (variant seed and run seed), and last the offline reference
// (sim.Offline with the bound policy).
func runTable(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tracesim table", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodesPath := fs.String("nodes", "", "node list CSV")
	podsPath := fs.String("pods", "", "pod list CSV the variants are drawn from")
	families := fs.String("families", "default,gpushare60,multigpu30", "comma-separated variant names; default is the pod list as it is")
	variantSeeds := fs.String("variant-seeds", "1-3", "seeds of the variants' draws: a range A-B or a list")
	seedSpec := fs.String("seeds", "42-43", "run seeds: a range A-B or a list")
	policy := fs.String("policy", "gpushare", "the policies compared, comma-separated")
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
	policies, err := parsePolicies(*policy)
	if err != nil {
		return err
	}
	if _, err := parsePolicies(*baseline); err != nil {
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
	head, rule := "| family | "+*baseline+" |", "| --- | --- |"
	for _, p := range policies {
		head += " " + p + " | ratio | worst run |"
		rule += " --- | --- | --- |"
	}
	fmt.Fprintf(stdout, "%s offline (%s) |\n%s --- |\n", head, *bound, rule)
	for fam := range strings.SplitSeq(*families, ",") {
		fam = strings.TrimSpace(fam)
		row, err := familyRow(nodes, base, fam, vseeds, seeds, policies, *baseline, *bound, *parallel)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, row)
	}
	return nil
}

// familyRow simulates one family and formats its table row.
func familyRow(nodes []placement.Node, base []trace.Task, fam string, vseeds, seeds []int64,
	policies []string, baseline, bound string, parallel int) (string, error) {
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
	sums, worst := make([]float64, len(policies)), make([]float64, len(policies))
	var sumB, sumO float64
	runs := 0
	for _, vs := range vseeds {
		tasks, err := variantTasks(base, nodes, variant, vs)
		if err != nil {
			return "", err
		}
		w := placement.NewWorkload(tasks, placement.DefaultCoverage)
		br, err := runSeeds(nodes, tasks, policyMaker(baseline, w, nil), seeds, parallel, consolidation{})
		if err != nil {
			return "", err
		}
		for j, policy := range policies {
			pr, err := runSeeds(nodes, tasks, policyMaker(policy, w, nil), seeds, parallel, consolidation{})
			if err != nil {
				return "", err
			}
			for i := range seeds {
				sums[j] += pr[i].UnallocAtRead
				if br[i].UnallocAtRead > 0 {
					worst[j] = max(worst[j], pr[i].UnallocAtRead/br[i].UnallocAtRead)
				}
			}
		}
		for i := range seeds {
			sumB += br[i].UnallocAtRead
		}
		runs += len(seeds)
		if bound == "none" {
			continue
		}
		or, err := offline(bound, nodes, tasks, w, seeds)
		if err != nil {
			return "", err
		}
		for _, r := range or {
			sumO += r.UnallocAtRead
		}
	}
	n := float64(runs)
	row := fmt.Sprintf("| %s | %.2f |", fam, sumB/n)
	for j := range policies {
		ratio := 0.0
		if sumB > 0 {
			ratio = sums[j] / sumB
		}
		row += fmt.Sprintf(" %.2f | %.3f | %.3f |", sums[j]/n, ratio, worst[j])
	}
	if bound == "none" {
		return row + " - |", nil
	}
	return row + fmt.Sprintf(" %.2f |", sumO/n), nil
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
