package nomadwatch

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpushare/nomad-gpushare/internal/feasible"
	"github.com/gpushare/nomad-gpushare/vocab/nomadread"
	nomadapi "github.com/hashicorp/nomad/api"
)

// constrainPending restricts every pending group to the snapshot's nodes
// that its job admits as Nomad's feasibility checks would (package
// feasible: datacenters, node pool, constraints on node fields, attributes
// and meta, each GPU device request's constraints on device attributes),
// as cluster.Pending.Nodes. A device request with constraints, or naming a
// device group, also limits the GPU models the group may use to those of
// the device groups that satisfy it. A group no node admits is left for
// the planner to report unplaceable, with the reason (which filters left
// out how many nodes).
func (a *assembler) constrainPending() {
	if m := a.in.memo; m != nil {
		// The Builder's memo keeps admissions while the nodes' facts
		// judge them the same.
		m.reviseAdmissions()
	}
	if len(a.snap.Pending) == 0 {
		return
	}
	facts := a.nodeFacts()
	memo, used := map[string]*keptAdmission{}, map[string]bool{}
	groups, seen := map[specGroup]groupKey{}, map[specGroup]groupKey{}
	if m := a.in.memo; m != nil {
		memo, groups = m.admissions, m.groupKeys
		defer m.keepAdmissions(used)
		defer func() { m.groupKeys = seen }()
	}
	for i := range a.snap.Pending {
		w := &a.snap.Pending[i]
		spec := a.in.Specs[w.Job]
		ref := specGroup{spec, w.Group}
		g, ok := groups[ref]
		if !ok {
			g.tg = groupOf(spec, w.Group)
			if g.tg != nil {
				g.key = admissionKey(spec, g.tg)
			}
		}
		seen[ref] = g
		tg, key := g.tg, g.key
		if tg == nil {
			continue
		}
		used[key] = true
		kept, ok := memo[key]
		if !ok {
			kept = &keptAdmission{adm: admit(facts, spec, tg), spec: spec, tg: tg}
			memo[key] = kept
		}
		adm := kept.adm
		w.Nodes, w.NodesReason = adm.nodes, adm.reason
		if adm.models != nil {
			w.Ask.Models = adm.models
		}
	}
}

// specGroup names a task group of a spec; groupKey is the group and its
// admissionKey, which the memo keeps while the spec (read only) is the
// same: a thousand pending groups' keys were made again every cycle.
type specGroup struct {
	spec  *nomadapi.Job
	group string
}

type groupKey struct {
	tg  *nomadapi.TaskGroup
	key string
}

// groupOf returns the task group of spec named name, or nil.
func groupOf(spec *nomadapi.Job, name string) *nomadapi.TaskGroup {
	if spec == nil {
		return nil
	}
	for _, tg := range spec.TaskGroups {
		if tg.Name != nil && *tg.Name == name {
			return tg
		}
	}
	return nil
}

// nodeFacts returns what the feasibility checks read of the snapshot's
// nodes, in snapshot order: from the full node where it was read, else
// from the list stub.
func (a *assembler) nodeFacts() []feasible.Node {
	if a.factsSet {
		return a.facts
	}
	stubs := map[string]*nomadapi.NodeListStub{}
	for _, n := range a.in.Nodes {
		stubs[n.ID] = n
	}
	facts := make([]feasible.Node, 0, len(a.nodeOrder))
	for _, ng := range a.nodeOrder {
		f := feasible.Node{ID: ng.id}
		stub := stubs[ng.id]
		if n := a.in.NodeInfo[ng.id]; n != nil {
			f.Name, f.Datacenter, f.Class, f.Pool, f.Attributes, f.Meta = n.Name, n.Datacenter, n.NodeClass, n.NodePool, n.Attributes, n.Meta
		} else if stub != nil {
			f.Name, f.Datacenter, f.Class, f.Pool, f.Attributes = stub.Name, stub.Datacenter, stub.NodeClass, stub.NodePool, stub.Attributes
		}
		if stub != nil && stub.NodeResources != nil {
			for _, g := range a.devicesOf(stub).groups {
				f.Devices = append(f.Devices, feasible.DeviceGroup{Resource: g.res, Own: g.own, Instances: g.instances, IDs: g.joinedIDs})
			}
		}
		facts = append(facts, f)
	}
	return facts
}

// admission is where one group may run: the node IDs (nil: every node),
// why the others are left out, and the GPU models its device constraints
// allow (nil: no restriction beyond the request names).
type admission struct {
	nodes  []string
	reason string
	models []string
}

// keptAdmission is an admission with the job and group it was judged
// for (any with the same admissionKey is judged the same).
type keptAdmission struct {
	adm  admission
	spec *nomadapi.Job
	tg   *nomadapi.TaskGroup
}

// admissionKey is the part of a job and group that decides its admission,
// so that groups alike share the work.
func admissionKey(spec *nomadapi.Job, tg *nomadapi.TaskGroup) string {
	var b strings.Builder
	pool := ""
	if spec.NodePool != nil {
		pool = *spec.NodePool
	}
	fmt.Fprintf(&b, "%q %q", spec.Datacenters, pool)
	for _, c := range feasible.GroupConstraints(spec, tg) {
		fmt.Fprintf(&b, "|%q %q %q", c.LTarget, c.Operand, c.RTarget)
	}
	for _, d := range feasible.GPURequests(tg) {
		fmt.Fprintf(&b, "|%q %d", d.Name, nomadread.ParseRequest(d).Count)
		for _, c := range d.Constraints {
			fmt.Fprintf(&b, " %q %q %q", c.LTarget, c.Operand, c.RTarget)
		}
	}
	return b.String()
}

// admit judges every node for the group.
func admit(facts []feasible.Node, spec *nomadapi.Job, tg *nomadapi.TaskGroup) admission {
	var adm admission
	filtered := map[string]int{}
	var causes []string
	models := map[string]bool{}
	restricted := false
	for i := range facts {
		f := &facts[i]
		why, allowed := f.Rejection(spec, tg)
		if why != "" {
			if filtered[why] == 0 {
				causes = append(causes, why)
			}
			filtered[why]++
			continue
		}
		adm.nodes = append(adm.nodes, f.ID)
		if allowed != nil {
			restricted = true
			for _, m := range allowed {
				models[m] = true
			}
		}
	}
	if len(causes) == 0 {
		adm.nodes = nil
	} else {
		if adm.nodes == nil {
			adm.nodes = []string{}
		}
		parts := make([]string, len(causes))
		for i, c := range causes {
			parts[i] = fmt.Sprintf("%s filtered %d node(s)", c, filtered[c])
		}
		adm.reason = strings.Join(parts, "; ")
	}
	if restricted {
		adm.models = make([]string, 0, len(models))
		for m := range models {
			adm.models = append(adm.models, m)
		}
		sort.Strings(adm.models)
	}
	return adm
}
