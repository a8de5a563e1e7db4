package placement

import (
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

func TestNomadLimit(t *testing.T) {
	tests := []struct {
		name     string
		jt       JobType
		nodes    int
		affinity bool
		want     int
	}{
		{"batch", Batch, 1213, false, 2},
		{"service: ceil(log2 1213)", Service, 1213, false, 11},
		{"service on a small cluster: at least 2", Service, 3, false, 2},
		{"affinity", Batch, 1213, true, 100},
		{"affinity, service", Service, 1213, true, 100},
	}
	for _, tc := range tests {
		if got := nomadLimit(tc.jt, tc.nodes, tc.affinity); got != tc.want {
			t.Errorf("%s: limit %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestBinPackFit(t *testing.T) {
	n := node("n", 10000, 1000, 2, "T4")
	tests := []struct {
		name      string
		cpu, mem  int64
		want      float64
		tolerance float64
	}{
		{"node left empty", 0, 0, 0, 0},
		{"node filled exactly", 10000, 1000, 1, 0},
		// free 0.5 and 0.5: 20 - 2*10^0.5 = 13.675, / 18.
		{"half", 5000, 500, 13.675 / 18, 0.001},
	}
	for _, tc := range tests {
		if got := binPackFit(&n, Task{CPUMilli: tc.cpu, MemoryMiB: tc.mem}); math.Abs(got-tc.want) > tc.tolerance {
			t.Errorf("%s: fit %.4f, want %.4f", tc.name, got, tc.want)
		}
	}
}

// familiesOf is a compact view of a publication: w, s or - per GPU.
func familiesOf(fam []family) string {
	b := make([]byte, len(fam))
	for i, f := range fam {
		b[i] = "-ws"[f]
	}
	return string(b)
}

func TestPublish(t *testing.T) {
	tests := []struct {
		name string
		free []cluster.Shares
		want string
	}{
		{"fresh node: the highest GPU is the share landing place", []cluster.Shares{100, 100, 100, 100}, "wwws"},
		{"share tenants without room keep a landing place", []cluster.Shares{30, 100, 0, 100}, "sw-s"},
		{"a share GPU with 50 free is room: no landing place", []cluster.Shares{50, 100, 100}, "sww"},
		{"full GPUs are published nowhere", []cluster.Shares{0, 0}, "--"},
		{"single-GPU node idle: it is the landing place", []cluster.Shares{100}, "s"},
	}
	for _, tc := range tests {
		n := node("n", 64000, 1<<20, len(tc.free), "T4")
		for i, f := range tc.free {
			n.GPUs[i].Free = f
		}
		if got := familiesOf(publish(&n, nil)); got != tc.want {
			t.Errorf("%s: published %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestDeployedInsideTheNode(t *testing.T) {
	t.Run("a whole GPU never takes the landing place while another node offers one", func(t *testing.T) {
		for seed := int64(1); seed <= 20; seed++ {
			c := &Cluster{Nodes: []Node{node("a", 64000, 1<<20, 1, "T4"), node("b", 64000, 1<<20, 2, "T4")}}
			p, _ := ByName("deployed", seed)
			ch, ok := p.Place(c, whole(1000, 1))
			if !ok || ch.Node != 1 || !slices.Equal(ch.GPUs, []int{0}) {
				t.Fatalf("seed %d: Place = %+v, %v; want node b GPU 0 (a's only GPU and b's GPU 1 are landing places)", seed, ch, ok)
			}
		}
	})
	t.Run("when no node serves the request as published, the plugins switch idle GPUs for it", func(t *testing.T) {
		c := &Cluster{Nodes: []Node{node("a", 64000, 1<<20, 1, "T4")}}
		p, _ := ByName("deployed", 1)
		ch, ok := p.Place(c, whole(1000, 1))
		if !ok || ch.Node != 0 {
			t.Fatalf("Place = %+v, %v; want the landing place switched to whole", ch, ok)
		}
	})
	t.Run("a share lands at random among share GPUs with room", func(t *testing.T) {
		seen := map[int]bool{}
		for seed := int64(1); seed <= 40; seed++ {
			c := &Cluster{Nodes: []Node{node("a", 64000, 1<<20, 3, "T4")}}
			c.Nodes[0].GPUs[0].Free, c.Nodes[0].GPUs[1].Free = 40, 45
			p, _ := ByName("deployed", seed)
			ch, ok := p.Place(c, share(1000, 30))
			if !ok || len(ch.GPUs) != 1 {
				t.Fatalf("seed %d: Place = %+v, %v", seed, ch, ok)
			}
			seen[ch.GPUs[0]] = true
		}
		// GPU 2 is the landing place (no in-use share GPU has 50 free).
		if len(seen) != 3 {
			t.Errorf("shares landed on GPUs %v; want all three share-mode GPUs over 40 seeds", seen)
		}
	})
}

func TestRankingSteersNomad(t *testing.T) {
	// Two T4 nodes: on a, one GPU has 0.50 free; b is idle. A 0.50 share
	// fills a's GPU without growing fragmentation (level 1); on b it would
	// cut into an idle GPU. Without the ranking, bin-packing on CPU and
	// memory prefers b, whose CPU the share would fill.
	nodes := func() *Cluster {
		c := &Cluster{Nodes: []Node{node("a", 64000, 1<<20, 2, "T4"), node("b", 8000, 1<<20, 2, "T4")}}
		c.Nodes[0].GPUs[0].Free = 50
		c.Nodes[0].GPUs[1].Free = 0
		return c
	}
	task := share(4000, 50)
	w := NewWorkload([]Task{task, whole(4000, 1)}, 1)
	r := NewRanking(w)
	c := nodes()
	if la, lb := r.Level(&c.Nodes[0], task), r.Level(&c.Nodes[1], task); la != 1 || lb != 0 {
		t.Fatalf("levels a=%d b=%d, want 1 and 0", la, lb)
	}
	for seed := int64(1); seed <= 10; seed++ {
		before := NewDeployed(rand.New(rand.NewSource(seed)), Batch, nil)
		if ch, ok := before.Place(nodes(), task); !ok || ch.Node != 1 {
			t.Fatalf("seed %d: without the ranking Place = %+v, %v; want b (bin-packing)", seed, ch, ok)
		}
		after := NewDeployed(rand.New(rand.NewSource(seed)), Batch, NewRanking(w))
		if ch, ok := after.Place(nodes(), task); !ok || ch.Node != 0 || ch.GPUs[0] != 0 {
			t.Fatalf("seed %d: with the ranking Place = %+v, %v; want a GPU 0", seed, ch, ok)
		}
	}
}

func TestRankingClasses(t *testing.T) {
	tasks := []Task{
		share(4000, 46), share(4000, 46), share(6000, 46), whole(12000, 1), whole(10000, 1),
		whole(88000, 8), {CPUMilli: 8000, MemoryMiB: 1024},
	}
	r := NewRanking(NewWorkload(tasks, 0.8))
	tests := []struct {
		task    Task
		key     string
		typical int64 // the class's mean CPU, 0 when the workload has no such class
	}{
		{share(4000, 46), "s46-c4", 4000},
		{share(5500, 46), "s46-c8", 6000},
		{whole(9000, 1), "w1-c16", 11000},
		{whole(88000, 8), "w8-c128", 88000}, // not a common type: classes cover every task
		{whole(64000, 8), "w8-c64", 0},
		{Task{CPUMilli: 7000}, "cpu-c8", 8000},
		{share(4000, 45), "s45-c4", 0},
	}
	for _, tc := range tests {
		if got := ClassKey(tc.task); got != tc.key {
			t.Errorf("ClassKey(%+v) = %s, want %s", tc.task, got, tc.key)
		}
		c, ok := r.ClassOf(tc.task)
		if ok != (tc.typical > 0) || c.CPUMilli != tc.typical {
			t.Errorf("ClassOf(%+v) = %+v, %v; want typical CPU %d", tc.task, c, ok, tc.typical)
		}
	}
}

func TestRankingAsDeviceAttribute(t *testing.T) {
	r := NewRanking(NewWorkload([]Task{share(1000, 50), {CPUMilli: 1000}}, 1))
	cpuOnly := Task{CPUMilli: 1000}
	if !r.carries(cpuOnly) || !r.raisesLimit() {
		t.Fatal("node metadata: every job carries the affinity and Nomad scores 100 nodes")
	}
	r.DeviceAttribute = true
	if r.carries(cpuOnly) || !r.carries(share(1000, 50)) || r.raisesLimit() {
		t.Error("device attribute: only jobs with a device request carry it, and Nomad's limit stays")
	}
}

func TestRankingLag(t *testing.T) {
	task := share(4000, 50)
	w := NewWorkload([]Task{task, whole(4000, 1)}, 1)
	c := &Cluster{Nodes: []Node{node("a", 64000, 1<<20, 2, "T4")}}
	c.Nodes[0].GPUs[0].Free = 50
	r := NewRanking(w)
	r.Lag = 3
	r.observe(c) // published: a's half-used GPU takes the share without growth
	if got := r.nodeScore(c, 0, task); got != 1 {
		t.Fatalf("score %v after publication, want 1", got)
	}
	c.Nodes[0].GPUs[0].Free = 0 // the half GPU is taken
	for i := range 3 {
		if got := r.nodeScore(c, 0, task); got != 1 {
			t.Fatalf("placement %d after the change: score %v, want the published 1", i, got)
		}
		r.observe(c)
	}
	if got := r.nodeScore(c, 0, task); got != 0 {
		t.Fatalf("after %d placements: score %v, want the republished 0", r.Lag, got)
	}
}

// TestCPUJobsElsewhere: with the node-pool recipe a CPU-only task is not
// placed on the GPU nodes; GPU tasks are, and without the recipe the
// CPU-only task is too.
func TestCPUJobsElsewhere(t *testing.T) {
	w := NewWorkload([]Task{share(1000, 50), {CPUMilli: 1000}}, 1)
	c := &Cluster{Nodes: []Node{node("a", 64000, 1<<20, 2, "G")}}
	for _, elsewhere := range []bool{false, true} {
		r := NewRanking(w)
		r.CPUJobsElsewhere = elsewhere
		p := NewDeployed(rand.New(rand.NewSource(1)), Batch, r)
		if _, ok := p.Place(c, Task{CPUMilli: 1000}); ok == elsewhere {
			t.Errorf("CPUJobsElsewhere %v: CPU-only task placed %v", elsewhere, ok)
		}
		if _, ok := p.Place(c, share(1000, 50)); !ok {
			t.Errorf("CPUJobsElsewhere %v: share not placed", elsewhere)
		}
	}
}
