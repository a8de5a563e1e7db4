package feasible

import (
	"fmt"
	"regexp"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/nomad/structs"
	nomadfeasible "github.com/hashicorp/nomad/scheduler/feasible"
)

// nomadContext is the little of a scheduling context Nomad's constraint
// checker reads.
type nomadContext struct {
	metrics *structs.AllocMetric
	re      map[string]*regexp.Regexp
	ver     map[string]nomadfeasible.VerConstraints
	semver  map[string]nomadfeasible.VerConstraints
}

func (c *nomadContext) Metrics() *structs.AllocMetric          { return c.metrics }
func (c *nomadContext) RegexpCache() map[string]*regexp.Regexp { return c.re }
func (c *nomadContext) VersionConstraintCache() map[string]nomadfeasible.VerConstraints {
	return c.ver
}
func (c *nomadContext) SemverConstraintCache() map[string]nomadfeasible.VerConstraints {
	return c.semver
}

// TestNodeConstraintsAsNomad checks the node constraints against Nomad's
// own checker (scheduler/feasible.ConstraintChecker) for every operand on
// node fields, attributes and meta, present and missing. The empty
// operand is left out: Nomad's job parser and API give every constraint
// one ("=" by default), and this package reads an empty one as "=".
func TestNodeConstraintsAsNomad(t *testing.T) {
	attrs := map[string]string{"kernel.name": "linux", "cpu.numcores": "16", "driver.docker.version": "27.3.1",
		"nvidia.driver": "550.54.15", "unique.platform.aws.instance-type": "p4d.24xlarge", "cpu.frequency": "2.5"}
	meta := map[string]string{"rack": "r12", "gpus": "a100,h100", "tier": "10"}
	nodes := []Node{
		{ID: "n-1", Name: "gpu-1", Datacenter: "dc1", Class: "gpu", Pool: "gpu", Attributes: attrs, Meta: meta},
		{ID: "n-2", Name: "cpu-2", Datacenter: "dc2", Class: "", Pool: "default", Attributes: map[string]string{"kernel.name": "darwin", "cpu.numcores": "4"}, Meta: map[string]string{"rack": "r3"}},
	}
	targets := []string{"${node.unique.id}", "${node.unique.name}", "${node.datacenter}", "${node.class}", "${node.pool}",
		"${attr.kernel.name}", "${attr.cpu.numcores}", "${attr.driver.docker.version}", "${attr.cpu.frequency}", "${meta.rack}", "${meta.gpus}", "${meta.tier}", "${meta.missing}"}
	values := []string{"linux", "16", "8", "2.5", "r12", "gpu", "dc1", "n-1", ">= 20.10", "~> 27.0", ">= 1.0.0, < 30.0.0", "^lin", "[0-9]+$", "a100", "h100,b200", "a100,h100", "", "9"}
	operands := []string{"=", "==", "is", "!=", "not", "<", "<=", ">", ">=", "is_set", "is_not_set", "version", "semver", "regexp",
		"set_contains", "set_contains_all", "set_contains_any", "distinct_hosts", "distinct_property"}
	ctx := &nomadContext{metrics: &structs.AllocMetric{}, re: map[string]*regexp.Regexp{},
		ver: map[string]nomadfeasible.VerConstraints{}, semver: map[string]nomadfeasible.VerConstraints{}}
	checked := 0
	for i := range nodes {
		n := &nodes[i]
		sn := &structs.Node{ID: n.ID, Name: n.Name, Datacenter: n.Datacenter, NodeClass: n.Class, NodePool: n.Pool, Attributes: n.Attributes, Meta: n.Meta}
		for _, l := range targets {
			for _, r := range values {
				for _, op := range operands {
					c := &nomadapi.Constraint{LTarget: l, RTarget: r, Operand: op}
					want := nomadfeasible.NewConstraintChecker(ctx, []*structs.Constraint{{LTarget: l, RTarget: r, Operand: op}}).Feasible(sn)
					if got := nodeConstraintHolds(c, n); got != want {
						t.Errorf("node %s: %s: got %v, Nomad %v", n.Name, fmt.Sprintf("%q %q %q", l, op, r), got, want)
					}
					checked++
				}
			}
		}
	}
	t.Logf("%d constraints checked", checked)
}
