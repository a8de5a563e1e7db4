// Package feasible answers whether a job's task group may run on a node as
// Nomad's feasibility checks do (Nomad's scheduler/feasible): the job's
// datacenters and node pool, the constraints on node fields, attributes
// and meta (the job's, the group's and its tasks'), and each gpushare
// device request's constraints on device attributes. The quota service
// asks it of every node for every pending group
// (quota-service/nomadwatch); the device plugin asks whether a waiting
// job's datacenters and node pool admit its node (device/alloctrack).
//
// Device constraints are judged per device group: a constraint that tells
// apart GPUs of one whole group (a share group's uuid or index) admits or
// refuses the node, not the single GPU. distinct_hosts and
// distinct_property limit where a job's instances go relative to each
// other, not whether one fits, and always hold.
package feasible

import (
	"fmt"
	"slices"
	"strings"

	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/ryanuber/go-glob"

	"github.com/gpushare/nomad-gpushare/vocab/nomadread"
)

// DefaultPool is the node pool of a job or node that names none.
const DefaultPool = "default"

// AllPools is the pool name with which a job admits every node pool.
const AllPools = "all"

// Node is what the checks read of one node.
type Node struct {
	ID, Name, Datacenter, Class string
	// Pool is the node's pool; "" is DefaultPool.
	Pool       string
	Attributes map[string]string
	Meta       map[string]string
	// Devices are its device groups, for device constraints.
	Devices []DeviceGroup
}

// DeviceGroup is one device group of a node: its resource (without need
// of its instance list), attributes of its own, its number of instances,
// and its instance IDs joined by commas, as Nomad reads ${device.ids}
// (nil: none).
type DeviceGroup struct {
	Resource *nomadapi.NodeDeviceResource
	// Own are attributes of this group that its resource's map leaves out,
	// so that groups alike but for them (a share group per GPU, differing
	// in its GPU's UUID) can share that map. An attribute here wins.
	Own       []NamedAttribute
	Instances int
	IDs       func() string
}

// NamedAttribute is one device attribute and its name.
type NamedAttribute struct {
	Name  string
	Value *nomadapi.Attribute
}

// attribute is the group's attribute name and whether it has one.
func (g DeviceGroup) attribute(name string) (*nomadapi.Attribute, bool) {
	for _, a := range g.Own {
		if a.Name == name {
			return a.Value, true
		}
	}
	a, ok := g.Resource.Attributes[name]
	return a, ok
}

func (n *Node) pool() string {
	if n.Pool == "" {
		return DefaultPool
	}
	return n.Pool
}

// InDatacenters reports whether datacenter dc is one of patterns, which
// may hold "*" wildcards as Nomad's glob matching reads them
// (structs.Node.IsInAnyDC). No patterns admit every datacenter (the
// default, "*").
func InDatacenters(patterns []string, dc string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if glob.Glob(p, dc) {
			return true
		}
	}
	return false
}

// JobPool is the job's node pool, DefaultPool when unset.
func JobPool(job *nomadapi.Job) string {
	if job.NodePool == nil || *job.NodePool == "" {
		return DefaultPool
	}
	return *job.NodePool
}

// InPool reports whether the job's node pool admits a node of pool
// nodePool ("" is DefaultPool): the same pool, or AllPools.
func InPool(job *nomadapi.Job, nodePool string) bool {
	if nodePool == "" {
		nodePool = DefaultPool
	}
	pool := JobPool(job)
	return pool == AllPools || pool == nodePool
}

// GroupConstraints are the constraints on nodes that apply to the group:
// its job's, its own and its tasks'.
func GroupConstraints(job *nomadapi.Job, tg *nomadapi.TaskGroup) []*nomadapi.Constraint {
	out := append(slices.Clip(job.Constraints), tg.Constraints...)
	for _, t := range tg.Tasks {
		out = append(out, t.Constraints...)
	}
	return out
}

// GPURequests are the group's gpushare device requests.
func GPURequests(tg *nomadapi.TaskGroup) []*nomadapi.RequestedDevice {
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

// Rejection returns why node n does not admit the group of job, or "" and
// the GPU models its device requests may use there (nil: no constraint on
// them). A device request with constraints, or naming a device group,
// limits the models to those of the device groups that satisfy it.
func (n *Node) Rejection(job *nomadapi.Job, tg *nomadapi.TaskGroup) (string, []string) {
	if why := n.NodeRejection(job, tg); why != "" {
		return why, nil
	}
	var models []string
	for _, d := range GPURequests(tg) {
		allowed, ok := deviceFits(d, n.Devices)
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

// NodeRejection returns why node n itself does not admit the group of
// job, its devices left unread: the job's datacenters and node pool, and
// the job's, group's and tasks' constraints. "" when it admits it.
func (n *Node) NodeRejection(job *nomadapi.Job, tg *nomadapi.TaskGroup) string {
	if !InDatacenters(job.Datacenters, n.Datacenter) {
		return fmt.Sprintf("datacenters %v", job.Datacenters)
	}
	if !InPool(job, n.Pool) {
		return fmt.Sprintf("node pool %q", JobPool(job))
	}
	for _, c := range GroupConstraints(job, tg) {
		if !nodeConstraintHolds(c, n) {
			return "constraint " + DescribeConstraint(c)
		}
	}
	return ""
}

// NodeOf is what the checks read of a node as Nomad's API returns it,
// devices left out.
func NodeOf(n *nomadapi.Node) Node {
	return Node{ID: n.ID, Name: n.Name, Datacenter: n.Datacenter, Class: n.NodeClass, Pool: n.NodePool, Attributes: n.Attributes, Meta: n.Meta}
}

// DescribeConstraint renders a constraint as a job file would.
func DescribeConstraint(c *nomadapi.Constraint) string {
	op := c.Operand
	if op == "" {
		op = "="
	}
	return strings.TrimSpace(fmt.Sprintf("%s %s %s", c.LTarget, op, c.RTarget))
}
