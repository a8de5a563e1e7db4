package placement

import "math/rand"

// Random places a task on a feasible node drawn uniformly at random and, for
// a share, on a random GPU of that node that fits; whole GPUs go to the
// lowest-numbered idle ones. This is what Nomad does today: it does not
// bin-pack GPUs.
type Random struct {
	rng  *rand.Rand
	buf  []int
	gbuf []int
}

// NewRandom returns the random policy drawing from rng.
func NewRandom(rng *rand.Rand) *Random { return &Random{rng: rng} }

// Name implements Policy.
func (*Random) Name() string { return "random" }

// SamplesNodes implements Policy: it draws among the feasible nodes itself.
func (*Random) SamplesNodes() bool { return true }

// Place implements Policy.
func (p *Random) Place(c *Cluster, t Task) (Choice, bool) {
	p.buf = p.buf[:0]
	for i := range c.Nodes {
		if fitsNode(&c.Nodes[i], t) {
			p.buf = append(p.buf, i)
		}
	}
	if len(p.buf) == 0 {
		return Choice{}, false
	}
	ni := p.buf[p.rng.Intn(len(p.buf))]
	n := &c.Nodes[ni]
	if !isShare(t) {
		return Choice{Node: ni, GPUs: lowestGPUs(n, t)}, true
	}
	p.gbuf = p.gbuf[:0]
	for g := range n.GPUs {
		if n.GPUs[g].Free >= t.Shares && t.MayUse(n.GPUs[g].Model, n.GPUs[g].Mode) {
			p.gbuf = append(p.gbuf, g)
		}
	}
	return Choice{Node: ni, GPUs: []int{p.gbuf[p.rng.Intn(len(p.gbuf))]}}, true
}
