package placement

import (
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// node builds an empty node with gpus GPUs of the model.
func node(name string, cpu, mem int64, gpus int, model string) Node {
	n := Node{Name: name, CPUMilli: cpu, FreeCPUMilli: cpu, MemoryMiB: mem, FreeMemoryMiB: mem}
	for range gpus {
		n.GPUs = append(n.GPUs, GPU{Model: model, Free: 100})
	}
	return n
}

func share(cpu int64, s cluster.Shares) Task { return Task{CPUMilli: cpu, GPUCount: 1, Shares: s} }
func whole(cpu int64, n int) Task {
	return Task{CPUMilli: cpu, GPUCount: n, Shares: cluster.SharesPerGPU}
}

func testWorkload() *Workload {
	return NewWorkload([]Task{share(4000, 50), share(4000, 50), whole(8000, 1), whole(8000, 1), {CPUMilli: 2000}}, 1)
}

func TestByName(t *testing.T) {
	w := testWorkload()
	for _, name := range Names() {
		p, err := ByName(name, 1, WithWorkload(w))
		if err != nil {
			t.Fatalf("ByName(%q): %v", name, err)
		}
		if p.Name() != name {
			t.Errorf("ByName(%q).Name() = %q", name, p.Name())
		}
	}
	_, err := ByName("nope", 1)
	if err == nil || !strings.Contains(err.Error(), "bestfit") || !strings.Contains(err.Error(), "gpushare") {
		t.Errorf("ByName(nope) error %v does not list valid names", err)
	}
	for _, name := range []string{"fgd", "gpushare"} {
		if _, err := ByName(name, 1); err == nil {
			t.Errorf("ByName(%q) without workload: no error", name)
		}
	}
}

func TestBestFitScore(t *testing.T) {
	tests := []struct {
		name string
		n    Node
		t    Task
		want int64
	}{
		{"empty 8-GPU node, one GPU", node("a", 96000, 1<<20, 8, "G2"), whole(0, 1), 18}, // 100*(1-(0.5*0.75+0.5*0.875)) = 18.75,
		{"exact fill", node("b", 128000, 1<<20, 8, "G2"), whole(128000, 8), 100},
		{"share", node("c", 64000, 1<<20, 2, "P100"), share(0, 50), 65}, // 100*(1-(0.5*0.5+0.5*0.1875)) = 65.6,
	}
	for _, tc := range tests {
		if got := bestFitScore(&tc.n, tc.t); got != tc.want {
			t.Errorf("%s: score %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestBestFitPrefersTightNodeAndGPU(t *testing.T) {
	c := &Cluster{Nodes: []Node{node("big", 96000, 1<<20, 8, "G2"), node("small", 16000, 1<<20, 2, "P100")}}
	c.Nodes[1].GPUs[1].Free = 60
	p := NewBestFit(rand.New(rand.NewSource(1)))
	ch, ok := p.Place(c, share(1000, 50))
	if !ok || ch.Node != 1 || len(ch.GPUs) != 1 || ch.GPUs[0] != 1 {
		t.Fatalf("Place = %+v, %v; want node 1, GPU 1 (tightest)", ch, ok)
	}
	ch, ok = p.Place(c, whole(1000, 2))
	if !ok || ch.Node != 0 || len(ch.GPUs) != 2 || ch.GPUs[0] != 0 || ch.GPUs[1] != 1 {
		t.Fatalf("Place = %+v, %v; want node 0, GPUs 0,1", ch, ok)
	}
}

func TestFGDAvoidsBreakingIdleGPU(t *testing.T) {
	// One node has a GPU with 500 free, the other is idle: a 500 share
	// should fill the half-used GPU rather than cut into an idle one.
	c := &Cluster{Nodes: []Node{node("idle", 32000, 1<<20, 2, "T4"), node("half", 32000, 1<<20, 2, "T4")}}
	c.Nodes[1].GPUs[0].Free = 50
	for _, name := range []string{"fgd", "gpushare", "bestfit"} {
		p, _ := ByName(name, 1, WithWorkload(testWorkload()))
		ch, ok := p.Place(c, share(1000, 50))
		if !ok || ch.Node != 1 || ch.GPUs[0] != 0 {
			t.Errorf("%s: Place = %+v, %v; want node 1 GPU 0", name, ch, ok)
		}
	}
}

func TestGPUShareSteersCPUOnlyToCPURichNode(t *testing.T) {
	// A CPU-only task on the GPU-dense node would leave too little CPU to
	// feed its GPUs; gpushare sends it to the CPU-rich node.
	c := &Cluster{Nodes: []Node{node("dense", 32000, 1<<20, 4, "G2"), node("rich", 104000, 1<<20, 2, "T4")}}
	p, _ := ByName("gpushare", 1, WithWorkload(testWorkload()))
	for i := 0; i < 20; i++ {
		ch, ok := p.Place(c, Task{CPUMilli: 8000})
		if !ok || ch.Node != 1 {
			t.Fatalf("Place = %+v, %v; want node 1", ch, ok)
		}
	}
}

func TestPoliciesFillClusterValidly(t *testing.T) {
	w := testWorkload()
	mix := []Task{share(2000, 30), share(4000, 70), whole(8000, 1), whole(16000, 2), {CPUMilli: 4000, MemoryMiB: 100}}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			c := &Cluster{Nodes: []Node{
				node("a", 64000, 1<<16, 8, "G2"), node("b", 16000, 1<<16, 2, "P100"), node("c", 8000, 1<<16, 1, "V100"),
			}}
			p, _ := ByName(name, 7, WithWorkload(w))
			rng := rand.New(rand.NewSource(3))
			placed := 0
			for range 200 {
				task := mix[rng.Intn(len(mix))]
				ch, ok := p.Place(c, task)
				if !ok {
					for i := range c.Nodes {
						if _, fits := c.Fits(i, task); fits {
							t.Fatalf("policy found no place for %+v but node %d fits", task, i)
						}
					}
					continue
				}
				if err := c.Assign(ch, task); err != nil {
					t.Fatalf("Assign(%+v): %v", ch, err)
				}
				placed++
			}
			if placed == 0 {
				t.Fatal("nothing placed")
			}
		})
	}
}

func TestPoliciesRespectModels(t *testing.T) {
	c := &Cluster{Nodes: []Node{node("t4", 64000, 1<<16, 2, "T4"), node("v100", 64000, 1<<16, 2, "V100")}}
	task := share(1000, 50)
	task.Models = []string{"V100"}
	for _, name := range Names() {
		p, _ := ByName(name, 1, WithWorkload(testWorkload()))
		for range 10 {
			ch, ok := p.Place(c, task)
			if !ok || ch.Node != 1 {
				t.Fatalf("%s: Place = %+v, %v; want the V100 node", name, ch, ok)
			}
		}
	}
}

func TestNewWorkload(t *testing.T) {
	tasks := []Task{share(1, 50), share(1, 50), share(1, 50), whole(1, 1), whole(1, 1), whole(1, 8)}
	tests := []struct {
		coverage float64
		types    int
		first    float64
	}{
		{0.5, 1, 1},
		{0.8, 2, 0.6},
		{1, 3, 0.5},
	}
	for _, tc := range tests {
		w := NewWorkload(tasks, tc.coverage)
		if len(w.Types) != tc.types || w.Types[0].Shares != 50 || w.Types[0].Weight != tc.first {
			t.Errorf("coverage %.2f: %+v; want %d types, first 0.50 GPU weight %.2f", tc.coverage, w.Types, tc.types, tc.first)
		}
	}
	w := NewWorkloadBy(tasks, 1, ByGPUDemand)
	if w.Types[0].GPUCount != 8 {
		t.Errorf("by GPU demand: first type %+v, want the 8-GPU type", w.Types[0])
	}
}

func TestFragMeasures(t *testing.T) {
	// Workload: half 500-shares, half 1-GPU tasks, 4000 mCPU each.
	w := NewWorkload([]Task{share(4000, 50), whole(4000, 1)}, 1)
	n := node("n", 8000, 1<<20, 2, "T4")
	tests := []struct {
		name      string
		cpu       int64
		free      []cluster.Shares
		fgd, fill float64
	}{
		// Both GPUs idle, CPU for two tasks: FGD sees no waste; fill sees
		// that two shares (all the CPU feeds) leave one GPU's worth.
		{"idle", 8000, []cluster.Shares{100, 100}, 0, 0.5 * 100},
		// 0.70 free on one GPU: the 1-GPU type cannot use it (FGD and fill);
		// fill also sees the 0.20 a 0.50 share leaves.
		{"partial", 8000, []cluster.Shares{70, 100}, 0.5 * 70, 0.5*(170-100) + 0.5*(170-100)},
		// CPU for one task only: FGD sees no waste, fill sees one GPU stranded.
		{"cpu short", 4000, []cluster.Shares{100, 100}, 0, 0.5*(200-50) + 0.5*(200-100)},
		// No CPU: everything is stranded for both.
		{"no cpu", 0, []cluster.Shares{100, 100}, 200, 200},
	}
	for _, tc := range tests {
		fgd := newFragMeter(w)
		fill := newFragMeter(w)
		fill.fill = true
		if got := fgd.frag(&n, tc.cpu, tc.free); got != (fragValue{fgd: tc.fgd}) {
			t.Errorf("%s: FGD meter %+v, want fgd %.1f and no fill", tc.name, got, tc.fgd)
		}
		if got := fill.frag(&n, tc.cpu, tc.free); got != (fragValue{fgd: tc.fgd, fill: tc.fill}) {
			t.Errorf("%s: gpushare meter %+v, want fgd %.1f fill %.1f", tc.name, got, tc.fgd, tc.fill)
		}
	}
}

func TestPlaceDeterministic(t *testing.T) {
	w := testWorkload()
	for _, name := range Names() {
		run := func() []Choice {
			c := &Cluster{Nodes: []Node{node("a", 64000, 1<<20, 8, "G2"), node("b", 64000, 1<<20, 8, "G2"), node("c", 64000, 1<<20, 8, "G2")}}
			p, _ := ByName(name, 42, WithWorkload(w))
			var out []Choice
			for range 30 {
				ch, ok := p.Place(c, share(1000, 30))
				if !ok {
					break
				}
				_ = c.Assign(ch, share(1000, 30))
				out = append(out, ch)
			}
			return out
		}
		a, b := run(), run()
		if len(a) != len(b) {
			t.Fatalf("%s: runs differ in length", name)
		}
		for i := range a {
			if a[i].Node != b[i].Node || a[i].GPUs[0] != b[i].GPUs[0] {
				t.Fatalf("%s: run differs at %d: %+v vs %+v", name, i, a[i], b[i])
			}
		}
	}
}

func TestFGDScore(t *testing.T) {
	tests := []struct {
		delta float64
		want  int64
	}{
		{0, 50},
		{1, 49},    // any growth loses to none
		{-3, 50},   // a small shrink ties with none
		{-5, 51},   // 100*sigmoid(0.05) = 51.2
		{100, 26},  // 100*sigmoid(-1) = 26.9
		{-100, 73}, // 100*sigmoid(1) = 73.1
		{1e5, 0},
	}
	for _, tc := range tests {
		if got := fgdScore(tc.delta); got != tc.want {
			t.Errorf("fgdScore(%v) = %d, want %d", tc.delta, got, tc.want)
		}
	}
}

func TestFGDTiesGoToFirstNode(t *testing.T) {
	tests := []struct {
		name  string
		task  Task
		node  int
		gpus  []int
		setup func(c *Cluster)
	}{
		{"identical idle nodes", whole(1000, 1), 0, []int{0}, func(*Cluster) {}},
		{"share on identical GPUs", share(1000, 50), 0, []int{0}, func(*Cluster) {}},
		// Node 0 is full; the rest tie.
		{"first feasible", whole(1000, 2), 1, []int{0, 1}, func(c *Cluster) {
			for i := range c.Nodes[0].GPUs {
				c.Nodes[0].GPUs[i].Free = 0
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &Cluster{Nodes: []Node{node("a", 64000, 1<<20, 4, "G2"), node("b", 64000, 1<<20, 4, "G2"), node("c", 64000, 1<<20, 4, "G2")}}
			tc.setup(c)
			for seed := int64(1); seed <= 5; seed++ {
				p, _ := ByName("fgd", seed, WithWorkload(testWorkload()))
				ch, ok := p.Place(c, tc.task)
				if !ok || ch.Node != tc.node || !slices.Equal(ch.GPUs, tc.gpus) {
					t.Fatalf("seed %d: Place = %+v, %v; want node %d GPUs %v", seed, ch, ok, tc.node, tc.gpus)
				}
			}
		})
	}
}

func TestFragMeasureCPUOnlyType(t *testing.T) {
	// A CPU-only task can use no GPU capacity: its type counts all free GPU
	// capacity, whether or not the task fits the node's CPU.
	w := NewWorkload([]Task{{CPUMilli: 4000}, whole(4000, 1)}, 1)
	n := node("n", 8000, 1<<20, 2, "T4")
	tests := []struct {
		name string
		cpu  int64
		free []cluster.Shares
		want float64
	}{
		{"fits", 8000, []cluster.Shares{100, 60}, 0.5*160 + 0.5*60},
		{"no cpu", 0, []cluster.Shares{100, 60}, 160},
		{"no gpu free", 8000, []cluster.Shares{0, 0}, 0},
	}
	for _, tc := range tests {
		if got := newFragMeter(w).frag(&n, tc.cpu, tc.free).fgd; got != tc.want {
			t.Errorf("%s: measure %.1f, want %.1f", tc.name, got, tc.want)
		}
	}
}

func TestGPUShareKeepsScarcePoolsForConstrainedWork(t *testing.T) {
	// Constrained work asks more for G2 (60% of tasks) than for T4 (20%),
	// but the T4 pool is small: 2 GPUs against 16. FGD counts a node's
	// whole free capacity as fragmented for the types that may not use
	// its model, so it sends unconstrained work to T4 (G2-only types are
	// the heavier); gpushare weighs each pool's free capacity against the
	// demand only it can serve, and keeps T4 for T4-only work.
	g2only, t4only := whole(4000, 1), whole(4000, 1)
	g2only.Models, t4only.Models = []string{"G2"}, []string{"T4"}
	var tasks []Task
	for range 6 {
		tasks = append(tasks, g2only)
	}
	tasks = append(tasks, t4only, t4only, whole(4000, 1), whole(4000, 1))
	w := NewWorkload(tasks, 1)
	cluster := func() *Cluster {
		return &Cluster{Nodes: []Node{node("t4", 64000, 1<<20, 2, "T4"), node("g2a", 64000, 1<<20, 8, "G2"), node("g2b", 64000, 1<<20, 8, "G2")}}
	}
	fgd, _ := ByName("fgd", 1, WithWorkload(w))
	if ch, ok := fgd.Place(cluster(), whole(4000, 1)); !ok || ch.Node != 0 {
		t.Fatalf("fgd: Place = %+v, %v; want the T4 node (the test's premise)", ch, ok)
	}
	gs, _ := ByName("gpushare", 1, WithWorkload(w))
	if ch, ok := gs.Place(cluster(), whole(4000, 1)); !ok || ch.Node == 0 {
		t.Fatalf("gpushare: Place = %+v, %v; want a G2 node", ch, ok)
	}
	if ch, ok := gs.Place(cluster(), t4only); !ok || ch.Node != 0 {
		t.Fatalf("gpushare: T4-only task placed %+v, %v", ch, ok)
	}
}

func TestGPUShareKeepsFGDsOrder(t *testing.T) {
	// Without model constraints, gpushare only breaks FGD's ties: the node
	// and GPU it picks always have FGD's best score.
	rng := rand.New(rand.NewSource(11))
	c, tasks := openbLikeCluster(rng)
	w := NewWorkload(tasks, DefaultCoverage)
	gs := NewGPUShare(nil, w)
	fgd := NewFGD(nil, w)
	for i := range 300 {
		task := tasks[rng.Intn(len(tasks))]
		ch, ok := gs.Place(c, task)
		if !ok {
			continue
		}
		var best int64 = -1
		for n := range c.Nodes {
			if fitsNode(&c.Nodes[n], task) {
				s, _ := fgd.scoreOnNode(&c.Nodes[n], task)
				best = max(best, s)
			}
		}
		got, _ := fgd.scoreOnNode(&c.Nodes[ch.Node], task)
		if isShare(task) {
			before := fgd.frag.current(&c.Nodes[ch.Node]).fgd
			got = fgdScore(fgd.frag.afterShare(&c.Nodes[ch.Node], task, ch.GPUs[0]).fgd - before)
		}
		if got != best {
			t.Fatalf("placement %d of %+v: gpushare's choice has FGD score %d, FGD's best is %d", i, task, got, best)
		}
		if err := c.Assign(ch, task); err != nil {
			t.Fatal(err)
		}
	}
}
