// Command tracesim runs placement policies over an openb-format trace with
// the method of the ATC'23 "Beware of Fragmentation" paper and prints one
// machine-readable line per trace and policy:
//
//	trace=default policy=bestfit unalloc_at_100=7.10 min=6.90 max=7.40 alloc_at_130=92.90 seeds=42-51
//
// unalloc_at_100 is the mean over seeds of the unallocated GPU share (%)
// when arrived GPU demand reaches 100% of capacity; min and max are over
// seeds; alloc_at_130 is the mean allocated share at 130%.
//
// Usage:
//
//	tracesim -nodes nodes.csv -pods pods.csv [-policy random,bestfit,fgd,gpushare] [-seeds 42-51] [-name default] [-parallel 1]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/gpushare/nomad-gpushare/scheduler/placement"
	"github.com/gpushare/nomad-gpushare/scheduler/sim"
	"github.com/gpushare/nomad-gpushare/scheduler/trace"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tracesim:", err)
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tracesim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodesPath := fs.String("nodes", "", "node list CSV (sn,cpu_milli,memory_mib,gpu,model)")
	podsPath := fs.String("pods", "", "pod list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec])")
	policies := fs.String("policy", strings.Join(defaultPolicies, ","), "comma-separated policies ("+strings.Join(placement.Names(), ", ")+")")
	seedSpec := fs.String("seeds", "42-51", "seeds: a range A-B or a comma-separated list")
	name := fs.String("name", "default", "trace name printed in the output")
	parallel := fs.Int("parallel", 1, "seeds simulated at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nodesPath == "" || *podsPath == "" {
		return errors.New("-nodes and -pods are required")
	}
	if *parallel < 1 {
		return fmt.Errorf("-parallel %d: must be at least 1", *parallel)
	}
	seeds, err := parseSeeds(*seedSpec)
	if err != nil {
		return err
	}
	nodes, err := trace.OpenNodes(*nodesPath)
	if err != nil {
		return err
	}
	ttasks, err := trace.OpenTasks(*podsPath)
	if err != nil {
		return err
	}
	tasks := make([]placement.Task, len(ttasks))
	for i, t := range ttasks {
		tasks[i] = t.Task
	}
	workload := placement.NewWorkload(tasks, placement.DefaultCoverage)
	for _, p := range strings.Split(*policies, ",") {
		p = strings.TrimSpace(p)
		if _, err := placement.ByName(p, 0, placement.WithWorkload(workload)); err != nil {
			return err
		}
		results, err := runSeeds(nodes, tasks, workload, p, seeds, *parallel)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, format(*name, p, *seedSpec, results))
	}
	return nil
}

var defaultPolicies = []string{"random", "bestfit", "fgd", "gpushare"}

func parseSeeds(s string) ([]int64, error) {
	if a, b, ok := strings.Cut(s, "-"); ok && a != "" {
		lo, err1 := strconv.ParseInt(a, 10, 64)
		hi, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil || hi < lo || hi-lo > 10000 {
			return nil, fmt.Errorf("-seeds %q: want A-B with A <= B", s)
		}
		var out []int64
		for v := lo; v <= hi; v++ {
			out = append(out, v)
		}
		return out, nil
	}
	var out []int64
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("-seeds %q: %w", s, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// runSeeds simulates policy on each seed, at most parallel at a time.
func runSeeds(nodes []placement.Node, tasks []placement.Task, w *placement.Workload, policy string, seeds []int64, parallel int) ([]sim.Result, error) {
	results := make([]sim.Result, len(seeds))
	errs := make([]error, len(seeds))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, seed := range seeds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			p, err := placement.ByName(policy, seed, placement.WithWorkload(w))
			if err != nil {
				errs[i] = err
				return
			}
			results[i], errs[i] = sim.Run(sim.Config{Nodes: nodes, Tasks: tasks, Policy: p, Seed: seed})
		}()
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

func format(name, policy, seeds string, rs []sim.Result) string {
	var sum, lo, hi, alloc float64
	for i, r := range rs {
		sum += r.UnallocAtRead
		alloc += r.AllocAtStop
		if i == 0 || r.UnallocAtRead < lo {
			lo = r.UnallocAtRead
		}
		if i == 0 || r.UnallocAtRead > hi {
			hi = r.UnallocAtRead
		}
	}
	n := float64(len(rs))
	return fmt.Sprintf("trace=%s policy=%s unalloc_at_100=%.2f min=%.2f max=%.2f alloc_at_130=%.2f seeds=%s",
		name, policy, sum/n, lo, hi, alloc/n, seeds)
}
