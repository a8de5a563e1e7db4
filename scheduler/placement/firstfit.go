package placement

// FirstFit places on the lowest-numbered node that fits, on its
// lowest-numbered GPUs that fit (Cluster.Fits): the planner's placement
// when no policy is given.
type FirstFit struct{}

// Name returns "first-fit".
func (FirstFit) Name() string { return "first-fit" }

// SamplesNodes is false: it looks at the nodes in order.
func (FirstFit) SamplesNodes() bool { return false }

// Place returns the first node, in order, that t fits on.
func (FirstFit) Place(c *Cluster, t Task) (Choice, bool) {
	for n := range c.Nodes {
		if gpus, ok := c.Fits(n, t); ok {
			return Choice{Node: n, GPUs: gpus}, true
		}
	}
	return Choice{}, false
}
