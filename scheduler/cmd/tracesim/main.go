// Command tracesim runs placement policies over an openb-format trace with
// the method of the ATC'23 "Beware of Fragmentation" paper and prints one
// machine-readable line per trace and policy:
//
//	trace=default policy=bestfit unalloc_at_100=7.10 min=6.90 max=7.40 alloc_at_130=92.90 seeds=42-51
//
// unalloc_at_100 is the mean over seeds of the unallocated GPU share (%)
// when arrived GPU demand reaches 100% of capacity; min and max are over
// seeds; alloc_at_130 is the mean allocated share at 130%. Lines printed
// after fgd's end with vs_fgd, the ratio of their unalloc_at_100 to fgd's.
// The offline reference's line (-bound) gives as alloc_at_130 its
// allocation at 100%: it places nothing more.
//
// Usage:
//
//	tracesim -nodes nodes.csv -pods pods.csv [-variant gpushare60] [-variant-seed 1]
//	         [-policy random,bestfit,fgd,gpushare] [-seeds 42-51] [-name default] [-parallel 1]
//	tracesim variant -nodes nodes.csv -pods pods.csv -variant multigpu30+gpuspec33 [-seed 1] [-o out.csv]
//	tracesim table -nodes nodes.csv -pods pods.csv [-families default,gpushare60,multigpu30]
//	         [-variant-seeds 1-3] [-seeds 42-43] [-policy gpushare] [-baseline fgd] [-bound gpushare]
//
// -variant draws a workload variant from the pod list by the published
// method (trace.Variant) before simulating; the variant subcommand writes
// one as a pod list instead; the table subcommand prints the variant table
// (docs/verification.md): per family of variants, the policy against a
// baseline, its worst run and the offline reference. -bound adds the
// offline reference's line (sim.Offline: the tasks that arrive until 100%,
// largest first). Besides the paper's baselines and gpushare,
// -policy takes the models of the deployment: deployed (batch jobs),
// deployed-service, and deployed-ranked (with the ranking mechanism).
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
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
	if len(args) > 0 && args[0] == "variant" {
		return runVariant(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "table" {
		return runTable(args[1:], stdout, stderr)
	}
	return runSimulate(args, stdout, stderr)
}

// workloadFlags are the flags that name the cluster and the task list.
type workloadFlags struct {
	nodes, pods, variant string
}

func (w *workloadFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&w.nodes, "nodes", "", "node list CSV (sn,cpu_milli,memory_mib,gpu,model)")
	fs.StringVar(&w.pods, "pods", "", "pod list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec])")
	fs.StringVar(&w.variant, "variant", "", "draw a workload variant from the pod list (e.g. gpushare60, multigpu30+gpuspec33)")
}

// load reads the node and pod lists and draws the variant, if any.
func (w *workloadFlags) load(variantSeed int64) ([]placement.Node, []trace.Task, error) {
	if w.nodes == "" || w.pods == "" {
		return nil, nil, errors.New("-nodes and -pods are required")
	}
	nodes, err := trace.OpenNodes(w.nodes)
	if err != nil {
		return nil, nil, err
	}
	tasks, err := trace.OpenTasks(w.pods)
	if err != nil {
		return nil, nil, err
	}
	if w.variant == "" {
		return nodes, tasks, nil
	}
	v, err := trace.ParseVariant(w.variant)
	if err != nil {
		return nil, nil, err
	}
	tasks, err = v.Apply(tasks, nodes, variantSeed)
	return nodes, tasks, err
}

func runVariant(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tracesim variant", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var w workloadFlags
	w.register(fs)
	seed := fs.Int64("seed", 1, "seed of the variant's random draws")
	out := fs.String("o", "", "output pod list (default: standard output)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if w.variant == "" {
		return errors.New("variant: -variant is required")
	}
	_, tasks, err := w.load(*seed)
	if err != nil {
		return err
	}
	if *out == "" {
		return trace.WriteTasks(stdout, tasks)
	}
	f, err := os.Create(*out)
	if err != nil {
		return fmt.Errorf("variant: %w", err)
	}
	if err := trace.WriteTasks(f, tasks); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func runSimulate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tracesim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var w workloadFlags
	w.register(fs)
	variantSeed := fs.Int64("variant-seed", 1, "seed of the variant's random draws")
	policies := fs.String("policy", strings.Join(defaultPolicies, ","), "comma-separated policies ("+strings.Join(placement.Names(), ", ")+")")
	seedSpec := fs.String("seeds", "42-51", "seeds: a range A-B or a comma-separated list")
	name := fs.String("name", "", "trace name printed in the output (default: the variant, or \"default\")")
	parallel := fs.Int("parallel", 1, "seeds simulated at once")
	perSeed := fs.Bool("per-seed", false, "add each seed's unallocated % to the line (per_seed=a,b,...)")
	bound := fs.String("bound", "", "also print the offline reference: the tasks that arrive until 100%, sorted largest first and placed by this policy (sim.Offline)")
	consolidate := fs.String("consolidate", "", "also print a run of this policy that moves movable tasks to place one that fits nowhere (sim.Config.Movable, placement.Consolidate)")
	movable := fs.Float64("movable", 0.3, "with -consolidate: the fraction of GPU tasks that may be moved")
	maxMoves := fs.Int("max-moves", placement.DefaultConsolidationLimits.MaxMoves, "with -consolidate: the most tasks moved to place one")
	rankOpts := fs.String("ranking", "", "alternatives of deployed-ranked's mechanism, comma-separated: nodemeta-only (no GPU ladder), gpu-jobs-only, cpu-jobs-elsewhere (CPU-only jobs in another node pool), device-attribute, exact, thresholds=0;-10, lag=N")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *parallel < 1 {
		return fmt.Errorf("-parallel %d: must be at least 1", *parallel)
	}
	seeds, err := parseSeeds(*seedSpec)
	if err != nil {
		return err
	}
	names, err := parsePolicies(*policies)
	if err != nil {
		return err
	}
	tune, err := parseRanking(*rankOpts)
	if err != nil {
		return err
	}
	nodes, ttasks, err := w.load(*variantSeed)
	if err != nil {
		return err
	}
	label := *name
	if label == "" {
		label = cmp.Or(w.variant, "default")
	}
	tasks := make([]placement.Task, len(ttasks))
	for i, t := range ttasks {
		tasks[i] = t.Task
	}
	workload := placement.NewWorkload(tasks, placement.DefaultCoverage)
	// fgdMean is FGD's mean once it ran: later lines give their ratio to it.
	fgdMean := 0.0
	vsFGD := func(rs []sim.Result) string {
		if fgdMean == 0 {
			return ""
		}
		return fmt.Sprintf(" vs_fgd=%.3f", meanUnalloc(rs)/fgdMean)
	}
	for _, p := range names {
		results, err := runSeeds(nodes, tasks, policyMaker(p, workload, tune), seeds, *parallel, consolidation{})
		if err != nil {
			return err
		}
		shown := p
		if p == "deployed-ranked" && tune != nil {
			// The mechanism's alternative is part of the name.
			shown += "(" + *rankOpts + ")"
		}
		line := format(label, shown, *seedSpec, results)
		if p == "fgd" && tune == nil {
			fgdMean = meanUnalloc(results)
		} else {
			line += vsFGD(results)
		}
		if *perSeed {
			line += " per_seed=" + formatPerSeed(results)
		}
		fmt.Fprintln(stdout, line)
	}
	if *consolidate != "" {
		if _, err := parsePolicies(*consolidate); err != nil {
			return err
		}
		if *movable <= 0 || *movable > 1 {
			return fmt.Errorf("-movable %g: must be in (0, 1]", *movable)
		}
		results, err := runSeeds(nodes, tasks, policyMaker(*consolidate, workload, nil), seeds, *parallel, consolidation{*movable, *maxMoves})
		if err != nil {
			return err
		}
		shown := fmt.Sprintf("consolidate(%s,movable=%.2f)", *consolidate, *movable)
		fmt.Fprintln(stdout, format(label, shown, *seedSpec, results)+vsFGD(results)+formatMoves(results))
	}
	if *bound != "" {
		results, err := offline(*bound, nodes, tasks, workload, seeds)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, format(label, "offline("+*bound+")", *seedSpec, results)+vsFGD(results))
	}
	return nil
}

// offline is the offline reference (sim.Offline) placed by policy, per seed.
func offline(policy string, nodes []placement.Node, tasks []placement.Task, w *placement.Workload, seeds []int64) ([]sim.Result, error) {
	if _, err := parsePolicies(policy); err != nil {
		return nil, err
	}
	results := make([]sim.Result, len(seeds))
	for i, seed := range seeds {
		p, err := policyMaker(policy, w, nil)(seed)
		if err != nil {
			return nil, err
		}
		if results[i], err = sim.Offline(sim.Config{Nodes: nodes, Tasks: tasks, Policy: p, Seed: seed}); err != nil {
			return nil, err
		}
	}
	return results, nil
}

// meanUnalloc is the mean unallocated % of rs.
func meanUnalloc(rs []sim.Result) float64 {
	var sum float64
	for _, r := range rs {
		sum += r.UnallocAtRead
	}
	return sum / float64(len(rs))
}

var defaultPolicies = []string{"random", "bestfit", "fgd", "gpushare"}

// parsePolicies splits a comma-separated policy list and checks each name.
func parsePolicies(s string) ([]string, error) {
	var names []string
	valid := placement.Names()
	for p := range strings.SplitSeq(s, ",") {
		p = strings.TrimSpace(p)
		ok := false
		for _, v := range valid {
			ok = ok || v == p
		}
		if !ok {
			return nil, fmt.Errorf("-policy: unknown placement policy %q (valid: %s)", p, strings.Join(valid, ", "))
		}
		names = append(names, p)
	}
	return names, nil
}

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

// policyMaker builds the named policy for a seed; tune, when not nil,
// changes deployed-ranked's mechanism.
func policyMaker(name string, w *placement.Workload, tune func(*placement.Ranking)) func(seed int64) (placement.Policy, error) {
	if name == "deployed-ranked" && tune != nil {
		return func(seed int64) (placement.Policy, error) {
			r := placement.NewRanking(w)
			tune(r)
			return placement.NewDeployed(rand.New(rand.NewSource(seed)), placement.Batch, r), nil
		}
	}
	return func(seed int64) (placement.Policy, error) {
		return placement.ByName(name, seed, placement.WithWorkload(w))
	}
}

// parseRanking reads -ranking: the alternatives of the ranking mechanism
// that the measurements behind its defaults compared.
func parseRanking(s string) (func(*placement.Ranking), error) {
	if s == "" {
		return nil, nil
	}
	var steps []func(*placement.Ranking)
	for opt := range strings.SplitSeq(s, ",") {
		key, val, _ := strings.Cut(strings.TrimSpace(opt), "=")
		switch key {
		case "nodemeta-only":
			steps = append(steps, func(r *placement.Ranking) { r.GPULadder = false })
		case "gpu-jobs-only":
			steps = append(steps, func(r *placement.Ranking) { r.GPUJobsOnly = true })
		case "cpu-jobs-elsewhere":
			steps = append(steps, func(r *placement.Ranking) { r.CPUJobsElsewhere = true })
		case "device-attribute":
			steps = append(steps, func(r *placement.Ranking) { r.DeviceAttribute = true })
		case "exact":
			steps = append(steps, func(r *placement.Ranking) { r.Exact = true })
		case "lag":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("-ranking %s: want lag=N placements, N >= 0", opt)
			}
			steps = append(steps, func(r *placement.Ranking) { r.Lag = n })
		case "thresholds":
			var th []float64
			for v := range strings.SplitSeq(val, ";") {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return nil, fmt.Errorf("-ranking %s: want thresholds=A;B;... in shares", opt)
				}
				th = append(th, f)
			}
			steps = append(steps, func(r *placement.Ranking) { r.Thresholds = th })
		default:
			return nil, fmt.Errorf("-ranking: unknown option %q (valid: nodemeta-only, gpu-jobs-only, cpu-jobs-elsewhere, device-attribute, exact, thresholds=A;B, lag=N)", opt)
		}
	}
	return func(r *placement.Ranking) {
		for _, step := range steps {
			step(r)
		}
	}, nil
}

// runSeeds simulates the policy build makes for each seed, at most parallel
// at a time.
// consolidation is a run's fraction of movable tasks and the most moves
// for one task (sim.Config.Movable and Consolidation); zero is none.
type consolidation struct {
	movable  float64
	maxMoves int
}

// runSeeds runs the simulation once per seed, parallel at once, with
// consolidation as cons says.
func runSeeds(nodes []placement.Node, tasks []placement.Task, build func(seed int64) (placement.Policy, error), seeds []int64, parallel int, cons consolidation) ([]sim.Result, error) {
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
			p, err := build(seed)
			if err != nil {
				errs[i] = err
				return
			}
			results[i], errs[i] = sim.Run(sim.Config{Nodes: nodes, Tasks: tasks, Policy: p, Seed: seed,
				Movable: cons.movable, Consolidation: placement.ConsolidationLimits{MaxMoves: cons.maxMoves}})
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

func formatPerSeed(rs []sim.Result) string {
	vals := make([]string, len(rs))
	for i, r := range rs {
		vals[i] = strconv.FormatFloat(r.UnallocAtRead, 'f', 2, 64)
	}
	return strings.Join(vals, ",")
}

// formatMoves is the mean moves and consolidated arrivals per run.
func formatMoves(rs []sim.Result) string {
	var moves, placed int
	for _, r := range rs {
		moves += r.Moves
		placed += r.Consolidated
	}
	return fmt.Sprintf(" moves=%.1f consolidated=%.1f", float64(moves)/float64(len(rs)), float64(placed)/float64(len(rs)))
}
