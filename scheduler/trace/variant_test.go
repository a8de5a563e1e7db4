package trace

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

func TestParseVariant(t *testing.T) {
	tests := []struct {
		in   string
		want Variant
		err  bool
	}{
		{"gpushare60", Variant{{GPUShare, 60, ByNode}}, false},
		{"multigpu30+gpuspec33", Variant{{MultiGPU, 30, ByNode}, {GPUSpec, 33, ByNode}}, false},
		{"cpu40", Variant{{CPUOnly, 40, ByNode}}, false},
		{"gpuspec0", Variant{{GPUSpec, 0, ByNode}}, false},
		{"gpuspec33g", Variant{{GPUSpec, 33, ByGPU}}, false},
		{"gpuspec10m+cpu30", Variant{{GPUSpec, 10, ByModel}, {CPUOnly, 30, ByNode}}, false},
		{"cpu30g", nil, true},
		{"gpushare", nil, true},
		{"gpushare101", nil, true},
		{"share60", nil, true},
		{"cpu-5", nil, true},
		{"multigpu30+", nil, true},
	}
	for _, tc := range tests {
		got, err := ParseVariant(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("ParseVariant(%q) error %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrBadVariant) {
				t.Errorf("ParseVariant(%q) error %v does not wrap ErrBadVariant", tc.in, err)
			}
			continue
		}
		if !reflect.DeepEqual(got, tc.want) || got.String() != tc.in {
			t.Errorf("ParseVariant(%q) = %v (%s), want %v", tc.in, got, got, tc.want)
		}
	}
}

// baseTasks is a small openb-like list: 10% CPU-only, shares of a few
// sizes, single and multi-GPU tasks.
func baseTasks() []Task {
	var tasks []Task
	add := func(n int, task placement.Task) {
		for i := range n {
			tasks = append(tasks, Task{Name: fmt.Sprintf("t%d-%d", len(tasks), i), Task: task})
		}
	}
	add(10, placement.Task{CPUMilli: 8000, MemoryMiB: 1024})
	add(30, placement.Task{CPUMilli: 4000, MemoryMiB: 1024, GPUCount: 1, Shares: 25})
	add(20, placement.Task{CPUMilli: 6000, MemoryMiB: 1024, GPUCount: 1, Shares: 50})
	add(35, placement.Task{CPUMilli: 12000, MemoryMiB: 1024, GPUCount: 1, Shares: 100})
	add(5, placement.Task{CPUMilli: 64000, MemoryMiB: 1024, GPUCount: 4, Shares: 100})
	return tasks
}

func variantNodes() []placement.Node {
	nodes := make([]placement.Node, 0, 12)
	for i := range 12 {
		gpuModel, gpus := "G2", 8
		if i%3 == 0 {
			gpuModel, gpus = "T4", 2
		}
		n := placement.Node{Name: fmt.Sprint(i), CPUMilli: 96000, FreeCPUMilli: 96000, MemoryMiB: 1 << 20, FreeMemoryMiB: 1 << 20}
		for range gpus {
			n.GPUs = append(n.GPUs, placement.GPU{Model: gpuModel, Free: cluster.SharesPerGPU})
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// shareOf is the share of measure that class carries among the tasks in scope.
func shareOf(tasks []Task, inScope, class func(Task) bool, measure func(Task) float64) float64 {
	var in, all float64
	for _, t := range tasks {
		if !inScope(t) {
			continue
		}
		all += measure(t)
		if class(t) {
			in += measure(t)
		}
	}
	return in / all
}

func TestVariantReachesItsTarget(t *testing.T) {
	gpu := func(t Task) bool { return t.GPUCount > 0 }
	all := func(Task) bool { return true }
	demand := func(t Task) float64 { return float64(t.Demand()) }
	tests := []struct {
		variant string
		scope   func(Task) bool
		class   func(Task) bool
		measure func(Task) float64
		want    float64
	}{
		{"gpushare60", gpu, func(t Task) bool { return t.GPUCount == 1 && t.Shares < cluster.SharesPerGPU }, demand, 0.60},
		{"gpushare100", gpu, func(t Task) bool { return t.GPUCount == 1 && t.Shares < cluster.SharesPerGPU }, demand, 1},
		{"multigpu40", gpu, func(t Task) bool { return t.GPUCount > 1 }, demand, 0.40},
		{"cpu50", all, func(t Task) bool { return t.GPUCount == 0 }, func(t Task) float64 { return float64(t.CPUMilli) }, 0.50},
		{"gpuspec33", gpu, func(t Task) bool { return len(t.Models) > 0 }, func(Task) float64 { return 1 }, 0.33},
		{"gpuspec20g", gpu, func(t Task) bool { return len(t.Models) > 0 }, func(Task) float64 { return 1 }, 0.20},
		{"gpuspec20m", gpu, func(t Task) bool { return len(t.Models) > 0 }, func(Task) float64 { return 1 }, 0.20},
	}
	base := baseTasks()
	nodes := variantNodes()
	for _, tc := range tests {
		t.Run(tc.variant, func(t *testing.T) {
			v, err := ParseVariant(tc.variant)
			if err != nil {
				t.Fatal(err)
			}
			got, err := v.Apply(base, nodes, 7)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(base) {
				t.Errorf("variant has %d tasks, base %d", len(got), len(base))
			}
			// Within one task's worth of the target (the largest task of
			// the list carries at most a few % of it).
			if s := shareOf(got, tc.scope, tc.class, tc.measure); math.Abs(s-tc.want) > 0.05 {
				t.Errorf("class share %.3f, want %.2f", s, tc.want)
			}
			again, _ := v.Apply(base, nodes, 7)
			if !reflect.DeepEqual(got, again) {
				t.Error("same seed, different variant")
			}
		})
	}
	if !reflect.DeepEqual(base, baseTasks()) {
		t.Error("Apply changed its input")
	}
}

func TestGPUSpecConstraintsAreSatisfiable(t *testing.T) {
	v, _ := ParseVariant("gpuspec50")
	nodes := variantNodes()
	got, err := v.Apply(baseTasks(), nodes, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range got {
		if len(task.Models) == 0 {
			continue
		}
		ok := false
		for i := range nodes {
			n := &nodes[i]
			ok = ok || task.MayUse(n.GPUs[0].Model, n.GPUs[0].Mode) && len(n.GPUs) >= task.GPUCount && n.CPUMilli >= task.CPUMilli
		}
		if !ok {
			t.Errorf("task %s constrained to %v fits no node", task.Name, task.Models)
		}
		if task.GPUCount == 4 && (len(task.Models) != 1 || task.Models[0] != "G2") {
			t.Errorf("4-GPU task constrained to %v; only G2 nodes have 4 GPUs", task.Models)
		}
	}
}

func TestVariantErrors(t *testing.T) {
	noMulti := baseTasks()[:95]
	v, _ := ParseVariant("multigpu30")
	if _, err := v.Apply(noMulti, variantNodes(), 1); err == nil || !errors.Is(err, ErrBadVariant) {
		t.Errorf("multigpu30 from a list without multi-GPU tasks: error %v", err)
	}
	onlyCPU := baseTasks()[:10]
	v, _ = ParseVariant("gpushare0")
	if _, err := v.Apply(onlyCPU, variantNodes(), 1); err == nil {
		t.Error("gpushare0 from a list without GPU tasks: no error")
	}
}

func TestWriteTasksRoundTrip(t *testing.T) {
	v, _ := ParseVariant("gpuspec50")
	tasks, err := v.Apply(baseTasks(), variantNodes(), 1)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteTasks(&buf, tasks); err != nil {
		t.Fatal(err)
	}
	back, err := ReadTasks("round.csv", &buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, tasks) {
		t.Errorf("read back %d tasks differ from the %d written", len(back), len(tasks))
	}
}

func TestGPUSpecModelDraws(t *testing.T) {
	// variantNodes: 8 G2 nodes of 8 GPUs, 4 T4 nodes of 2 GPUs. A draw
	// picks T4 with probability p (by node 4/12, by GPU 8/72, by model
	// 1/2); a constraint is T4 alone when the first draw is T4 and either
	// no second model is drawn (3 in 4) or it is T4 too.
	alone := func(p float64) float64 { return p * (0.75 + 0.25*p) }
	tests := []struct {
		variant string
		want    float64
	}{
		{"gpuspec100", alone(4.0 / 12)},
		{"gpuspec100g", alone(8.0 / 72)},
		{"gpuspec100m", alone(0.5)},
	}
	var base []Task
	for i := range 2000 {
		base = append(base, Task{Name: fmt.Sprint(i), Task: placement.Task{CPUMilli: 1000, GPUCount: 1, Shares: 50}})
	}
	for _, tc := range tests {
		v, _ := ParseVariant(tc.variant)
		got, err := v.Apply(base, variantNodes(), 5)
		if err != nil {
			t.Fatal(err)
		}
		t4 := 0
		for _, task := range got {
			if len(task.Models) == 1 && task.Models[0] == "T4" {
				t4++
			}
		}
		if share := float64(t4) / float64(len(got)); math.Abs(share-tc.want) > 0.03 {
			t.Errorf("%s: %.3f of the tasks may use T4 only, want about %.3f", tc.variant, share, tc.want)
		}
	}
}
