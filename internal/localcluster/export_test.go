package localcluster

// AlivePIDs is alivePIDs, for the package's external tests.
var AlivePIDs = alivePIDs

// ProcessTree returns the processes under the Nomad agent (with those a
// restart left detached) and the two agents' own.
func (c *Cluster) ProcessTree() (tree, agents []int) {
	tree = append(descendants(c.nomad.cmd.Process.Pid), c.detached...)
	return tree, []int{c.nomad.cmd.Process.Pid, c.consul.cmd.Process.Pid}
}
