package feasible

import (
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/nomad/structs"
)

// admits reports whether the job's datacenters and node pool admit a node
// of datacenter dc and pool nodePool (its group has no constraint).
func admits(job *nomadapi.Job, dc, nodePool string) bool {
	n := Node{Datacenter: dc, Pool: nodePool}
	return n.NodeRejection(job, &nomadapi.TaskGroup{}) == ""
}

// TestJobAdmits: a job's datacenters (with wildcards) and node pool admit
// a node as Nomad's do.
func TestJobAdmits(t *testing.T) {
	tests := []struct {
		name     string
		dcs      []string
		pool     string
		dc, node string
		want     bool
	}{
		{"same datacenter and pool", []string{"dc1"}, "gpu", "dc1", "gpu", true},
		{"any datacenter", []string{"*"}, "gpu", "dc1", "gpu", true},
		{"wildcard, all pools", []string{"dc*"}, "all", "dc1", "gpu", true},
		{"no datacenters", nil, "gpu", "dc1", "gpu", true},
		{"other datacenter", []string{"dc2"}, "gpu", "dc1", "gpu", false},
		{"job in the default pool", []string{"dc1"}, "", "dc1", "gpu", false},
		{"both in the default pool", []string{"dc1"}, "", "dc1", "default", true},
		{"node naming no pool", []string{"dc1"}, "default", "dc1", "", true},
		{"other pool", []string{"dc1"}, "cpu", "dc1", "gpu", false},
		{"wildcard across a slash", []string{"eu-*"}, "", "eu-west/1", "", true},
		{"no other pattern syntax", []string{"dc?"}, "", "dc1", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := &nomadapi.Job{Datacenters: tt.dcs, NodePool: &tt.pool}
			if got := admits(job, tt.dc, tt.node); got != tt.want {
				t.Errorf("admits = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestJobAdmitsAsNomad checks the datacenter and pool checks against Nomad's own checks
// (structs.Node.IsInAnyDC and IsInPool) on jobs and nodes as Nomad's
// servers canonicalize them (a job names at least one datacenter and a
// pool, a node its pool).
func TestJobAdmitsAsNomad(t *testing.T) {
	patterns := [][]string{{"*"}, {"dc1"}, {"dc2"}, {"dc*"}, {"*1"}, {"d*c*"}, {"dc1", "dc2"}, {"eu-*"}, {"dc?"}, {"dc[12]"}, {"DC1"}}
	dcs := []string{"dc1", "dc2", "dc10", "eu-west/1", "dc?", "dc[12]", ""}
	pools := []string{structs.NodePoolDefault, structs.NodePoolAll, "gpu", "cpu"}
	nodePools := []string{structs.NodePoolDefault, "gpu", "cpu"}
	for _, ps := range patterns {
		for _, dc := range dcs {
			for _, pool := range pools {
				for _, np := range nodePools {
					node := &structs.Node{Datacenter: dc, NodePool: np}
					want := node.IsInAnyDC(ps) && node.IsInPool(pool)
					job := &nomadapi.Job{Datacenters: ps, NodePool: &pool}
					if got := admits(job, dc, np); got != want {
						t.Errorf("datacenters %q pool %q, node in %q pool %q: admits = %v, Nomad %v", ps, pool, dc, np, got, want)
					}
				}
			}
		}
	}
}

// TestRejection: the first filter that leaves a node out names it.
func TestRejection(t *testing.T) {
	str := func(s string) *string { return &s }
	node := Node{ID: "n1", Name: "gpu-1", Datacenter: "dc1", Pool: "gpu", Attributes: map[string]string{"kernel.name": "linux"}}
	group := func(cs ...*nomadapi.Constraint) *nomadapi.TaskGroup {
		return &nomadapi.TaskGroup{Name: str("g"), Tasks: []*nomadapi.Task{{Name: "t", Constraints: cs}}}
	}
	tests := []struct {
		name string
		job  *nomadapi.Job
		tg   *nomadapi.TaskGroup
		want string
	}{
		{"admitted", &nomadapi.Job{Datacenters: []string{"dc*"}, NodePool: str("gpu")}, group(), ""},
		{"datacenter", &nomadapi.Job{Datacenters: []string{"dc2"}, NodePool: str("gpu")}, group(), "datacenters [dc2]"},
		{"pool", &nomadapi.Job{Datacenters: []string{"dc1"}}, group(), `node pool "default"`},
		{"task constraint, empty operand read as =", &nomadapi.Job{NodePool: str("all")},
			group(&nomadapi.Constraint{LTarget: "${attr.kernel.name}", RTarget: "windows"}), "constraint ${attr.kernel.name} = windows"},
		{"job constraint", &nomadapi.Job{NodePool: str("all"), Constraints: []*nomadapi.Constraint{{LTarget: "${node.pool}", Operand: "!=", RTarget: "gpu"}}},
			group(), "constraint ${node.pool} != gpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := node.Rejection(tt.job, tt.tg); got != tt.want {
				t.Errorf("Rejection = %q, want %q", got, tt.want)
			}
		})
	}
}
