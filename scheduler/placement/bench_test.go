package placement

import (
	"math/rand"
	"testing"
)

// openbLikeCluster builds a cluster with the node mix of the Alibaba openb
// trace (1,213 nodes, 6,212 GPUs) and fills it to about half with a task
// mix like the trace's, so that benchmarks see realistic, varied states.
func openbLikeCluster(rng *rand.Rand) (*Cluster, []Task) {
	mix := []struct {
		count    int
		cpu, mem int64
		gpus     int
		gpuModel string
	}{
		{549, 96000, 393216, 8, "G2"}, {387, 104000, 524288, 2, "T4"}, {107, 16000, 122880, 2, "P100"},
		{39, 128000, 786432, 8, "G3"}, {28, 32000, 131072, 4, "V100M16"}, {22, 64000, 262144, 2, "P100"},
		{21, 96000, 786432, 8, "V100M32"}, {19, 8000, 32768, 1, "V100M16"}, {17, 96000, 393216, 4, "T4"},
		{9, 48000, 376832, 4, "V100M32"}, {7, 64000, 262144, 8, "V100M16"}, {3, 8000, 61440, 1, "P100"},
		{2, 8000, 61440, 2, "P100"}, {2, 128000, 1048576, 1, "A10"}, {1, 82000, 344064, 8, "V100M16"},
	}
	c := &Cluster{}
	for _, m := range mix {
		for range m.count {
			c.Nodes = append(c.Nodes, node("n", m.cpu, m.mem, m.gpus, m.gpuModel))
		}
	}
	tasks := []Task{
		whole(12000, 1), whole(12000, 1), whole(12000, 1), share(3000, 81), share(8000, 47),
		share(4000, 32), share(6000, 65), share(4000, 23), {CPUMilli: 12500, MemoryMiB: 16384},
		whole(32000, 2), whole(48000, 4), whole(64000, 8),
	}
	p := NewRandom(rng)
	for range 5000 {
		t := tasks[rng.Intn(len(tasks))]
		if ch, ok := p.Place(c, t); ok {
			_ = c.Assign(ch, t)
		}
	}
	return c, tasks
}

func BenchmarkPlace(b *testing.B) {
	rng := rand.New(rand.NewSource(1))
	c, tasks := openbLikeCluster(rng)
	w := NewWorkload(tasks, DefaultCoverage)
	for _, name := range Names() {
		b.Run(name, func(b *testing.B) {
			p, err := ByName(name, 1, WithWorkload(w))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				p.Place(c, tasks[i%len(tasks)])
				i++
			}
		})
	}
}
