package placement

import (
	"slices"
	"testing"
)

// TestFirstFit: the first node in order with room, on its lowest GPUs that
// fit; none when nothing fits.
func TestFirstFit(t *testing.T) {
	c := &Cluster{Nodes: []Node{node("full", 8000, 1<<20, 2, "H100"), node("free", 8000, 1<<20, 4, "H100")}}
	for g := range c.Nodes[0].GPUs {
		c.Nodes[0].GPUs[g].Free = 0
	}
	c.Nodes[1].GPUs[0].Free = 0
	two := Task{CPUMilli: 100, GPUCount: 2, Shares: 100}
	ch, ok := FirstFit{}.Place(c, two)
	if !ok || ch.Node != 1 || !slices.Equal(ch.GPUs, []int{1, 2}) {
		t.Errorf("two GPUs: %+v %v, want node 1 GPUs [1 2]", ch, ok)
	}
	if _, ok := (FirstFit{}).Place(c, Task{GPUCount: 4, Shares: 100}); ok {
		t.Error("four GPUs fit, want none: node 1 has three free")
	}
}
