package trace

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// Kind names what a workload variant emphasizes, as the openb pod lists
// derived from the default one do (the ATC'23 paper, section 6, and the
// openb README): the number after the kind is a percentage.
type Kind string

// The kinds of variant. The first three resample the task list; the last
// adds GPU-model constraints to tasks as they are.
const (
	// GPUShare: tasks that share a GPU carry the given % of the GPU demand
	// (the published gpushare40 has 40%; the default list about 28%).
	GPUShare Kind = "gpushare"
	// MultiGPU: tasks asking for several GPUs carry the given % of the GPU
	// demand (published multigpu20: 20%; default about 7%).
	MultiGPU Kind = "multigpu"
	// CPUOnly: tasks asking for no GPU carry the given % of the CPU asked
	// by all tasks (default about 22%).
	CPUOnly Kind = "cpu"
	// GPUSpec: the given % of the GPU tasks may use only some GPU models
	// (about 33% in Alibaba's production cluster; none in the default list).
	GPUSpec Kind = "gpuspec"
)

var kinds = []Kind{GPUShare, MultiGPU, CPUOnly, GPUSpec}

// Step is one change to a task list: a kind and its level in percent, and
// for GPUSpec the way constraints pick models.
type Step struct {
	Kind    Kind
	Percent int
	Draw    ModelDraw
}

// ModelDraw is how a GPUSpec step picks the model a constraint names,
// among the models of the nodes that can hold the task.
type ModelDraw byte

// The model draws, written after the percentage ("gpuspec33g").
const (
	// ByNode draws the model of a uniformly drawn node (the default; no
	// letter): models of many small nodes are asked for beyond their
	// share of GPUs.
	ByNode ModelDraw = 0
	// ByGPU draws the model of a uniformly drawn GPU ("g"): each pool is
	// asked for in proportion to its size.
	ByGPU ModelDraw = 'g'
	// ByModel draws a model uniformly ("m"): small pools are asked for far
	// beyond their size.
	ByModel ModelDraw = 'm'
)

// Variant is a list of steps applied in order, written like the openb
// file names and joined with "+": "multigpu30", "gpushare60+gpuspec33".
type Variant []Step

// ErrBadVariant is wrapped by ParseVariant's and Apply's errors.
var ErrBadVariant = errors.New("bad workload variant")

// ParseVariant reads a variant name such as "gpushare60" or
// "multigpu30+gpuspec33".
func ParseVariant(s string) (Variant, error) {
	var v Variant
	for part := range strings.SplitSeq(s, "+") {
		step, err := parseStep(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%w %q: %w", ErrBadVariant, s, err)
		}
		v = append(v, step)
	}
	return v, nil
}

func parseStep(s string) (Step, error) {
	for _, k := range kinds {
		digits, ok := strings.CutPrefix(s, string(k))
		if !ok || digits == "" {
			continue
		}
		var draw ModelDraw
		if last := digits[len(digits)-1]; k == GPUSpec && (last == byte(ByGPU) || last == byte(ByModel)) {
			draw, digits = ModelDraw(last), digits[:len(digits)-1]
		}
		p, err := strconv.Atoi(digits)
		if err != nil || p < 0 || p > 100 {
			return Step{}, fmt.Errorf("%q: want %s followed by a percentage 0-100%s", s, k, drawHint(k))
		}
		return Step{Kind: k, Percent: p, Draw: draw}, nil
	}
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k) + "NN"
	}
	return Step{}, fmt.Errorf("%q: want one of %s", s, strings.Join(names, ", "))
}

func drawHint(k Kind) string {
	if k == GPUSpec {
		return " and optionally g (models drawn by GPU) or m (by model)"
	}
	return ""
}

// String is the variant's name, as ParseVariant reads it.
func (v Variant) String() string {
	parts := make([]string, len(v))
	for i, s := range v {
		parts[i] = string(s.Kind) + strconv.Itoa(s.Percent)
		if s.Draw != ByNode {
			parts[i] += string(rune(s.Draw))
		}
	}
	return strings.Join(parts, "+")
}

// Apply draws the variant from base (the task list it resamples; the
// published variants start from the default list) for the cluster nodes,
// with random choices from seed. base is not changed.
//
// The resampling kinds keep the number of tasks they resample and draw
// them with replacement, one at a time: the next task comes from the
// emphasized class while that class's share of the measure drawn so far is
// below the target, and from the other tasks otherwise, each uniformly
// within its class. So the mix inside each class stays the base's, and the
// class reaches its target within one task. GPUShare and MultiGPU resample
// the GPU tasks and keep the CPU-only ones; CPUOnly resamples all tasks.
//
// GPUSpec picks, uniformly, GPU tasks without a constraint until the given
// % of the GPU tasks have one, and constrains each to a model drawn from
// the nodes that can hold the task when empty (Step.Draw: by default the
// model of a uniformly drawn node); one time in four a second model is
// allowed too. Drawing by node rather than by GPU asks for the models of
// small nodes (T4, P100) more often than their share of GPUs, as production
// constraints do (the published gpuspec33 list asks for T4 far beyond its
// 14% of the GPUs).
func (v Variant) Apply(base []Task, nodes []placement.Node, seed int64) ([]Task, error) {
	rng := rand.New(rand.NewSource(seed))
	tasks := base
	for _, s := range v {
		var err error
		if tasks, err = s.apply(tasks, nodes, rng); err != nil {
			return nil, fmt.Errorf("%w %s: %w", ErrBadVariant, v, err)
		}
	}
	return tasks, nil
}

func (s Step) apply(tasks []Task, nodes []placement.Node, rng *rand.Rand) ([]Task, error) {
	p := float64(s.Percent) / 100
	isGPU := func(t Task) bool { return t.GPUCount > 0 }
	gpuDemand := func(t Task) float64 { return float64(t.Demand()) }
	switch s.Kind {
	case GPUShare:
		isShare := func(t Task) bool { return t.GPUCount == 1 && t.Shares < cluster.SharesPerGPU }
		return resampleWithin(rng, tasks, isGPU, isShare, p, gpuDemand, "GPU-sharing")
	case MultiGPU:
		isMulti := func(t Task) bool { return t.GPUCount > 1 }
		return resampleWithin(rng, tasks, isGPU, isMulti, p, gpuDemand, "multi-GPU")
	case CPUOnly:
		all := func(Task) bool { return true }
		isCPUOnly := func(t Task) bool { return t.GPUCount == 0 }
		cpu := func(t Task) float64 { return float64(t.CPUMilli) }
		return resampleWithin(rng, tasks, all, isCPUOnly, p, cpu, "CPU-only")
	case GPUSpec:
		return constrainModels(rng, tasks, nodes, p, s.Draw), nil
	}
	return nil, fmt.Errorf("unknown kind %q", s.Kind)
}

// resampleWithin redraws the tasks in scope (the others are kept as they
// are) so that the class carries share p of measure among them.
func resampleWithin(rng *rand.Rand, tasks []Task, inScope, inClass func(Task) bool, p float64,
	measure func(Task) float64, class string) ([]Task, error) {
	var kept, in, out []Task
	for _, t := range tasks {
		switch {
		case !inScope(t):
			kept = append(kept, t)
		case inClass(t):
			in = append(in, t)
		default:
			out = append(out, t)
		}
	}
	if len(in) == 0 && p > 0 {
		return nil, fmt.Errorf("the task list has no %s tasks to draw from", class)
	}
	if len(out) == 0 && p < 1 {
		return nil, fmt.Errorf("the task list has only %s tasks: cannot bring them down to %.0f%%", class, 100*p)
	}
	n := len(in) + len(out)
	drawn := make([]Task, 0, len(kept)+n)
	drawn = append(drawn, kept...)
	var inSum, total float64
	for range n {
		from := out
		if total == 0 && p > 0 || total > 0 && inSum/total < p {
			from = in
		}
		t := from[rng.Intn(len(from))]
		m := measure(t)
		if inClass(t) {
			inSum += m
		}
		total += m
		drawn = append(drawn, t)
	}
	return drawn, nil
}

// constrainModels gives share p of the GPU tasks a GPU-model constraint
// (counting those that already have one).
func constrainModels(rng *rand.Rand, tasks []Task, nodes []placement.Node, p float64, draw ModelDraw) []Task {
	out := make([]Task, len(tasks))
	copy(out, tasks)
	var free []int
	gpuTasks, constrained := 0, 0
	for i, t := range out {
		if t.GPUCount == 0 {
			continue
		}
		gpuTasks++
		if len(t.Models) > 0 {
			constrained++
		} else {
			free = append(free, i)
		}
	}
	want := int(p*float64(gpuTasks)+0.5) - constrained
	rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	for _, i := range free {
		if want <= 0 {
			break
		}
		hosts := hostsOf(nodes, out[i].Task)
		if len(hosts) == 0 {
			continue
		}
		models := []string{modelOf(rng, hosts, draw)}
		if rng.Intn(4) == 0 {
			if m := modelOf(rng, hosts, draw); m != models[0] {
				models = append(models, m)
			}
		}
		slices.Sort(models)
		out[i].Models = models
		want--
	}
	return out
}

// hostsOf lists the nodes with GPUs that can hold t when empty.
func hostsOf(nodes []placement.Node, t placement.Task) []*placement.Node {
	var hosts []*placement.Node
	for i := range nodes {
		n := &nodes[i]
		if len(n.GPUs) > 0 && len(n.GPUs) >= t.GPUCount && n.CPUMilli >= t.CPUMilli && n.MemoryMiB >= t.MemoryMiB {
			hosts = append(hosts, n)
		}
	}
	return hosts
}

// modelOf draws a model from the GPUs of hosts.
func modelOf(rng *rand.Rand, hosts []*placement.Node, draw ModelDraw) string {
	switch draw {
	case ByGPU:
		k := 0
		for _, n := range hosts {
			k += len(n.GPUs)
		}
		k = rng.Intn(k)
		for _, n := range hosts {
			if k < len(n.GPUs) {
				return n.GPUs[k].Model
			}
			k -= len(n.GPUs)
		}
	case ByModel:
		var models []string
		for _, n := range hosts {
			for _, g := range n.GPUs {
				if !slices.Contains(models, g.Model) {
					models = append(models, g.Model)
				}
			}
		}
		return models[rng.Intn(len(models))]
	}
	n := hosts[rng.Intn(len(hosts))]
	return n.GPUs[rng.Intn(len(n.GPUs))].Model
}
