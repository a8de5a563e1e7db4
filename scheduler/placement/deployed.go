package placement

import "math/rand"

// Deployed is what gpushare's deployment does today, as a policy: Nomad
// chooses the node (nomad.go: a few random feasible nodes, scored by CPU
// and memory bin-packing) and, inside it, the device plugin's publication
// and Nomad's random choice among equal device groups decide the GPU
// (plugin.go). It is a model for measuring the deployment with the same
// simulator as the other policies, not something to deploy.
//
// With a Ranking, it models the deployment with the ranking mechanism:
// the nodes publish the ranking, jobs carry affinities on it, and Nomad's
// scoring does the rest (see Ranking).
type Deployed struct {
	name    string
	jobType JobType
	rank    *Ranking
	rng     *rand.Rand
	sampler nodeSampler
	fam     []family
	gpus    []int
	bestBuf []int
}

// NewDeployed returns the model of today's deployment for jobs of type jt,
// with the ranking mechanism when rank is not nil.
func NewDeployed(rng *rand.Rand, jt JobType, rank *Ranking) *Deployed {
	name := "deployed"
	if jt == Service {
		name += "-service"
	}
	if rank != nil {
		name += "-ranked"
	}
	return &Deployed{name: name, jobType: jt, rank: rank, rng: rng, sampler: nodeSampler{rng: rng}}
}

// Name implements Policy.
func (p *Deployed) Name() string { return p.name }

// SamplesNodes implements Policy: Nomad visits the feasible nodes in a
// random order itself.
func (*Deployed) SamplesNodes() bool { return true }

// Place implements Policy: Nomad's choice among the nodes as published; if
// no node can serve t as published, the choice once the plugins have moved
// idle GPUs for the waiting request.
func (p *Deployed) Place(c *Cluster, t Task) (Choice, bool) {
	if p.rank != nil {
		if p.rank.CPUJobsElsewhere && t.GPUCount == 0 {
			return Choice{}, false // in another node pool
		}
		p.rank.observe(c)
	}
	if ch, ok := p.choose(c, t, false); ok {
		return ch, true
	}
	return p.choose(c, t, true)
}

// choose scores the first feasible nodes in random order, as many as
// Nomad's limit, and returns the best. forDemand publishes every idle GPU
// in the family t needs.
func (p *Deployed) choose(c *Cluster, t Task, forDemand bool) (Choice, bool) {
	ranked := p.rank != nil && p.rank.carries(t)
	limit := nomadLimit(p.jobType, len(c.Nodes), ranked && p.rank.raisesLimit())
	var gpuScore gpuScorer
	if ranked && p.rank.GPULadder {
		gpuScore = p.rank.gpuScore
	}
	best, seen := -1, 0
	bestScore := 0.0
	p.sampler.each(len(c.Nodes), func(i int) bool {
		n := &c.Nodes[i]
		if n.FreeCPUMilli < t.CPUMilli || n.FreeMemoryMiB < t.MemoryMiB {
			return true
		}
		if forDemand {
			p.fam = publishForDemand(n, t, p.fam)
		} else {
			p.fam = publish(n, p.fam)
		}
		gpus, ladder, ok := offerDevices(p.rng, n, t, p.fam, gpuScore, p.gpus)
		if !ok {
			return true
		}
		score := p.nodeScore(c, i, t, ranked, ladder)
		if best < 0 || score > bestScore {
			best, bestScore = i, score
			p.bestBuf = append(p.bestBuf[:0], gpus...)
		}
		seen++
		return seen < limit
	})
	if best < 0 {
		return Choice{}, false
	}
	ch := Choice{Node: best}
	if t.GPUCount > 0 {
		ch.GPUs = append([]int(nil), p.bestBuf...)
	}
	return ch, true
}

// nodeScore is Nomad's final score of n for t: the mean of the bin-pack
// fit, the node-affinity score and the device-affinity score, the last two
// only when the job carries such affinities. A device request's affinities
// make one score: the matched weight over the total weight (rank.go,
// device.go createOffer), here the level and the GPU ladder weighing alike.
func (p *Deployed) nodeScore(c *Cluster, i int, t Task, ranked bool, ladder float64) float64 {
	fit := binPackFit(&c.Nodes[i], t)
	if !ranked {
		return fit
	}
	level := p.rank.nodeScore(c, i, t)
	withLadder := isShare(t) && p.rank.GPULadder
	switch {
	case p.rank.DeviceAttribute && withLadder:
		return (fit + (level+ladder)/2) / 2
	case p.rank.DeviceAttribute:
		return (fit + level) / 2
	case withLadder:
		return (fit + level + ladder) / 3
	}
	return (fit + level) / 2
}
