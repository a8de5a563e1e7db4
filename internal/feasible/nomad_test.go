package feasible

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/nomad/structs"
	psstructs "github.com/hashicorp/nomad/plugins/shared/structs"
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
	held, checked := 0, 0
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
					if want {
						held++
					}
				}
			}
		}
	}
	if held == 0 || held == checked {
		t.Fatalf("%d of %d constraints hold: the cases do not tell the checkers apart", held, checked)
	}
}

// TestDeviceConstraintsAsNomad checks a GPU request's constraints on a
// device group against Nomad's own device checker
// (scheduler/feasible.DeviceChecker) for every operand on the group's
// fields and attributes (with units), present and missing. One instance
// is asked for: how a count spreads over groups is the device allocator's
// (it takes them all from one group, which deviceFits requires).
func TestDeviceConstraintsAsNomad(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	s := func(v string) *string { return &v }
	api := &nomadapi.NodeDeviceResource{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA A100-SXM4-40GB",
		Instances: []*nomadapi.NodeDevice{{ID: "GPU-a", Healthy: true}, {ID: "GPU-b", Healthy: true}},
		Attributes: map[string]*nomadapi.Attribute{
			"memory":             {IntVal: i64(40960), Unit: "MiB"},
			"model":              {StringVal: s("NVIDIA A100-SXM4-40GB")},
			"cuda_compute":       {StringVal: s("8.0")},
			"driver_version":     {StringVal: s("550.54.15")},
			"gpu_shares":         {IntVal: i64(14)},
			"pci_bandwidth_mbps": {IntVal: i64(16000), Unit: "MB/s"},
		}}
	nd := &structs.NodeDeviceResource{Vendor: api.Vendor, Type: api.Type, Name: api.Name,
		Instances:  []*structs.NodeDevice{{ID: "GPU-a", Healthy: true}, {ID: "GPU-b", Healthy: true}},
		Attributes: map[string]*psstructs.Attribute{}}
	for k, a := range api.Attributes {
		nd.Attributes[k] = toAttribute(a)
	}
	group := DeviceGroup{Resource: api, Instances: 2, IDs: func() string { return "GPU-a,GPU-b" }}
	// The same group with some attributes kept as its own, as the quota
	// service keeps a share group's per-GPU ones, must judge alike.
	rest := *api
	rest.Attributes = map[string]*nomadapi.Attribute{}
	var own []NamedAttribute
	for k, a := range api.Attributes {
		if k == "memory" || k == "model" {
			own = append(own, NamedAttribute{Name: k, Value: a})
			continue
		}
		rest.Attributes[k] = a
	}
	split := DeviceGroup{Resource: &rest, Own: own, Instances: 2, IDs: group.IDs}
	node := &structs.Node{ID: "n1", NodeResources: &structs.NodeResources{Devices: []*structs.NodeDeviceResource{nd}}}
	targets := []string{"${device.model}", "${device.vendor}", "${device.type}", "${device.ids}",
		"${device.attr.memory}", "${device.attr.model}", "${device.attr.cuda_compute}", "${device.attr.driver_version}",
		"${device.attr.gpu_shares}", "${device.attr.pci_bandwidth_mbps}", "${device.attr.missing}"}
	values := []string{"40 GiB", "40960", "80 GiB", "30000 MiB", "NVIDIA A100-SXM4-40GB", "nvidia", "gpu", "GPU-a", "GPU-a,GPU-b",
		"8.0", ">= 7.5", ">= 550.0", "~> 550.54", "^NVIDIA", "A100", "14", "10", "2 GB/s", "true", ""}
	operands := []string{"=", "==", "is", "!=", "not", "<", "<=", ">", ">=", "is_set", "is_not_set", "version", "semver", "regexp",
		"set_contains", "set_contains_all", "set_contains_any", "distinct_hosts", "distinct_property"}
	ctx := nomadfeasible.NewEvalContext(nil, nil, nil, hclog.NewNullLogger())
	checker := nomadfeasible.NewDeviceChecker(ctx)
	held, checked := 0, 0
	for _, l := range targets {
		for _, r := range values {
			for _, op := range operands {
				c := &nomadapi.Constraint{LTarget: l, RTarget: r, Operand: op}
				one := uint64(1)
				req := &nomadapi.RequestedDevice{Name: "nvidia/gpu", Count: &one, Constraints: []*nomadapi.Constraint{c}}
				checker.SetTaskGroup(&structs.TaskGroup{Tasks: []*structs.Task{{Resources: &structs.Resources{Devices: []*structs.RequestedDevice{
					{Name: "nvidia/gpu", Count: 1, Constraints: []*structs.Constraint{{LTarget: l, RTarget: r, Operand: op}}}}}}}})
				want := checker.Feasible(node)
				if _, got := deviceFits(req, []DeviceGroup{group}); got != want {
					t.Errorf("%q %q %q: got %v, Nomad %v", l, op, r, got, want)
				}
				if _, got := deviceFits(req, []DeviceGroup{split}); got != want {
					t.Errorf("%q %q %q, attributes of its own: got %v, Nomad %v", l, op, r, got, want)
				}
				checked++
				if want {
					held++
				}
			}
		}
	}
	if held == 0 || held == checked {
		t.Fatalf("%d of %d constraints hold: the cases do not tell the checkers apart", held, checked)
	}
}
