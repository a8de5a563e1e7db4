package nomadwatch

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/gpushare/nomad-gpushare/vocab/nomadread"
	nomadapi "github.com/hashicorp/nomad/api"
)

// constrainPending restricts every pending group to the snapshot's nodes
// that its job's datacenters, node pool and constraints admit, as Nomad's
// feasibility checks would (model.Pending.Nodes): constraints on node
// fields, attributes and meta (job, group and task constraints), and each
// GPU device request's constraints on device attributes. A device request
// with constraints, or naming a device group, also limits the GPU models
// the group may use to those of the device groups that satisfy it. A group no node admits is left
// for the planner to report unplaceable, with the reason (which filters
// left out how many nodes).
//
// Device constraints are judged per device group, and a node's GPUs of one
// model share one whole group: a constraint that tells apart GPUs of the
// same model (a share group's uuid or index) admits or refuses the node,
// not the single GPU. distinct_hosts and distinct_property limit where a
// job's instances go relative to each other, not whether one fits, and
// are not checked.
func (a *assembler) constrainPending() {
	if len(a.snap.Pending) == 0 {
		return
	}
	facts := a.nodeFacts()
	memo := map[string]admission{}
	for i := range a.snap.Pending {
		w := &a.snap.Pending[i]
		spec := a.in.Specs[w.Job]
		tg := groupOf(spec, w.Group)
		if tg == nil {
			continue
		}
		key := admissionKey(spec, tg)
		adm, ok := memo[key]
		if !ok {
			adm = admit(facts, spec, tg)
			memo[key] = adm
		}
		w.Nodes, w.NodesReason = adm.nodes, adm.reason
		if adm.models != nil {
			w.Ask.Models = adm.models
		}
	}
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

// nodeFacts is what constraints read of one node.
type nodeFacts struct {
	id, name, datacenter, class, pool string
	attrs, meta                       map[string]string
	devices                           []deviceGroup
}

// nodeFacts returns the facts of the snapshot's nodes, in snapshot order:
// from the full node where it was read, else from the list stub.
func (a *assembler) nodeFacts() []nodeFacts {
	stubs := map[string]*nomadapi.NodeListStub{}
	for _, n := range a.in.Nodes {
		stubs[n.ID] = n
	}
	facts := make([]nodeFacts, 0, len(a.nodeOrder))
	for _, ng := range a.nodeOrder {
		f := nodeFacts{id: ng.id}
		stub := stubs[ng.id]
		if n := a.in.NodeInfo[ng.id]; n != nil {
			f.name, f.datacenter, f.class, f.pool, f.attrs, f.meta = n.Name, n.Datacenter, n.NodeClass, n.NodePool, n.Attributes, n.Meta
		} else if stub != nil {
			f.name, f.datacenter, f.class, f.pool, f.attrs = stub.Name, stub.Datacenter, stub.NodeClass, stub.NodePool, stub.Attributes
		}
		if stub != nil && stub.NodeResources != nil {
			f.devices = a.devicesOf(stub).groups
		}
		if f.pool == "" {
			f.pool = "default"
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

// admissionKey is the part of a job and group that decides its admission,
// so that groups alike share the work.
func admissionKey(spec *nomadapi.Job, tg *nomadapi.TaskGroup) string {
	var b strings.Builder
	pool := ""
	if spec.NodePool != nil {
		pool = *spec.NodePool
	}
	fmt.Fprintf(&b, "%q %q", spec.Datacenters, pool)
	for _, c := range groupConstraints(spec, tg) {
		fmt.Fprintf(&b, "|%q %q %q", c.LTarget, c.Operand, c.RTarget)
	}
	for _, d := range gpuRequests(tg) {
		fmt.Fprintf(&b, "|%q %d", d.Name, nomadread.ParseRequest(d).Count)
		for _, c := range d.Constraints {
			fmt.Fprintf(&b, " %q %q %q", c.LTarget, c.Operand, c.RTarget)
		}
	}
	return b.String()
}

// groupConstraints are the constraints on nodes that apply to the group:
// its job's, its own and its tasks'.
func groupConstraints(spec *nomadapi.Job, tg *nomadapi.TaskGroup) []*nomadapi.Constraint {
	out := append(slices.Clip(spec.Constraints), tg.Constraints...)
	for _, t := range tg.Tasks {
		out = append(out, t.Constraints...)
	}
	return out
}

// gpuRequests are the group's gpushare device requests.
func gpuRequests(tg *nomadapi.TaskGroup) []*nomadapi.RequestedDevice {
	var out []*nomadapi.RequestedDevice
	for _, t := range tg.Tasks {
		if t.Resources == nil {
			continue
		}
		for _, d := range t.Resources.Devices {
			if r := nomadread.ParseRequest(d); d != nil && (r.Whole() || r.Share()) {
				out = append(out, d)
			}
		}
	}
	return out
}

// admit judges every node for the group.
func admit(facts []nodeFacts, spec *nomadapi.Job, tg *nomadapi.TaskGroup) admission {
	var adm admission
	filtered := map[string]int{}
	var causes []string
	models := map[string]bool{}
	restricted := false
	for i := range facts {
		f := &facts[i]
		why, allowed := rejection(f, spec, tg)
		if why != "" {
			if filtered[why] == 0 {
				causes = append(causes, why)
			}
			filtered[why]++
			continue
		}
		adm.nodes = append(adm.nodes, f.id)
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

// rejection returns why node f does not admit the group, or "" and the
// GPU models its device requests may use there (nil: no constraint on
// them).
func rejection(f *nodeFacts, spec *nomadapi.Job, tg *nomadapi.TaskGroup) (string, []string) {
	if !datacenterMatches(spec.Datacenters, f.datacenter) {
		return fmt.Sprintf("datacenters %v", spec.Datacenters), nil
	}
	if pool := jobPool(spec); pool != "all" && pool != f.pool {
		return fmt.Sprintf("node pool %q", pool), nil
	}
	for _, c := range groupConstraints(spec, tg) {
		if !nodeConstraintHolds(c, f) {
			return "constraint " + describeConstraint(c), nil
		}
	}
	var models []string
	for _, d := range gpuRequests(tg) {
		allowed, ok := deviceFits(d, f.devices)
		if !ok {
			return fmt.Sprintf("device %q", d.Name), nil
		}
		if len(d.Constraints) > 0 || nomadread.ParseRequest(d).Name != "" {
			// A share group's name is its GPU's, not its model's.
			models = append(models, allowed...)
		}
	}
	return "", models
}

// datacenterMatches reports whether a node's datacenter matches one of the
// job's, which may be glob patterns (Nomad's default is "*").
func datacenterMatches(patterns []string, dc string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, err := path.Match(p, dc); ok && err == nil {
			return true
		}
	}
	return false
}

// jobPool is the job's node pool, Nomad's "default" when unset.
func jobPool(spec *nomadapi.Job) string {
	if spec.NodePool == nil || *spec.NodePool == "" {
		return "default"
	}
	return *spec.NodePool
}

// describeConstraint renders a constraint as a job file would.
func describeConstraint(c *nomadapi.Constraint) string {
	op := c.Operand
	if op == "" {
		op = "="
	}
	return strings.TrimSpace(fmt.Sprintf("%s %s %s", c.LTarget, op, c.RTarget))
}
