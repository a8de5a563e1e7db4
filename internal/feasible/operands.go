package feasible

import (
	"cmp"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/gpushare/nomad-gpushare/vocab/nomadread"
	"github.com/hashicorp/go-version"
	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/constraints/semver"
	psstructs "github.com/hashicorp/nomad/plugins/shared/structs"
)

// The constraint operands, as Nomad's job specification names them
// (scheduler/feasible: checkConstraint for nodes, checkAttributeConstraint
// for devices). A value that is not found makes every operand but "!=",
// is_set and is_not_set false.

// nodeConstraintHolds reports whether node n satisfies c.
func nodeConstraintHolds(c *nomadapi.Constraint, n *Node) bool {
	l, lOK := n.resolve(c.LTarget)
	r, rOK := n.resolve(c.RTarget)
	switch op := c.Operand; op {
	case "distinct_hosts", "distinct_property":
		return true
	case "", "=", "==", "is":
		return lOK && rOK && l == r
	case "!=", "not":
		return l != r
	case "<", "<=", ">", ">=":
		return lOK && rOK && order(op, l, r)
	case "is_set":
		return lOK
	case "is_not_set":
		return !lOK
	case "version", "semver":
		return lOK && rOK && versionMatches(op, l, r)
	case "regexp":
		return lOK && rOK && regexpMatches(l, r)
	case "set_contains", "set_contains_all":
		return lOK && rOK && setContains(l, r, true)
	case "set_contains_any":
		return lOK && rOK && setContains(l, r, false)
	}
	return false
}

// resolve reads a constraint target on node n: a literal, or one of
// ${node.unique.id}, ${node.unique.name}, ${node.datacenter},
// ${node.class}, ${node.pool}, ${attr.X} and ${meta.X}.
func (n *Node) resolve(target string) (string, bool) {
	if !strings.HasPrefix(target, "${") {
		return target, true
	}
	switch {
	case target == "${node.unique.id}":
		return n.ID, true
	case target == "${node.unique.name}":
		return n.Name, true
	case target == "${node.datacenter}":
		return n.Datacenter, true
	case target == "${node.class}":
		return n.Class, true
	case target == "${node.pool}":
		return n.pool(), true
	case strings.HasPrefix(target, "${attr."):
		v, ok := n.Attributes[strings.TrimSuffix(strings.TrimPrefix(target, "${attr."), "}")]
		return v, ok
	case strings.HasPrefix(target, "${meta."):
		v, ok := n.Meta[strings.TrimSuffix(strings.TrimPrefix(target, "${meta."), "}")]
		return v, ok
	}
	return "", false
}

// order compares two values as integers, else as floats, else lexically.
func order(op, l, r string) bool {
	if li, err := strconv.ParseInt(l, 10, 64); err == nil {
		if ri, err := strconv.ParseInt(r, 10, 64); err == nil {
			return holds(op, cmp.Compare(li, ri))
		}
	}
	if lf, err := strconv.ParseFloat(l, 64); err == nil {
		if rf, err := strconv.ParseFloat(r, 64); err == nil {
			return holds(op, cmp.Compare(lf, rf))
		}
	}
	return holds(op, cmp.Compare(l, r))
}

// holds reports whether a comparison result c satisfies operand op.
func holds(op string, c int) bool {
	switch op {
	case "", "=", "==", "is":
		return c == 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	}
	return false
}

// versionMatches checks version l against constraint r: go-version's
// syntax for "version", Nomad's strict semver for "semver".
func versionMatches(op, l, r string) bool {
	v, err := version.NewVersion(l)
	if err != nil {
		return false
	}
	if op == "semver" {
		c, err := semver.NewConstraint(r)
		return err == nil && c.Check(v)
	}
	c, err := version.NewConstraint(r)
	return err == nil && c.Check(v)
}

func regexpMatches(l, r string) bool {
	re, err := regexp.Compile(r)
	return err == nil && re.MatchString(l)
}

// setContains reports whether the comma-separated set l holds every (all)
// or any value of the comma-separated list r.
func setContains(l, r string, all bool) bool {
	set := map[string]bool{}
	for _, v := range strings.Split(l, ",") {
		set[strings.TrimSpace(v)] = true
	}
	for _, v := range strings.Split(r, ",") {
		if set[strings.TrimSpace(v)] != all {
			return !all
		}
	}
	return all
}

// deviceFits reports whether one device group of the node can serve the
// request: its vendor, type and name match, it has the instances the
// request counts (Nomad takes them all from one group), and its
// attributes satisfy the request's constraints. It returns the GPU models
// of the groups that can.
func deviceFits(d *nomadapi.RequestedDevice, devices []DeviceGroup) ([]string, bool) {
	req := nomadread.ParseRequest(d)
	var models []string
	for _, dg := range devices {
		g := dg.Resource
		if g.Vendor != vocab.Vendor || g.Type != req.Type || (req.Name != "" && g.Name != req.Name) || dg.Instances < req.Count {
			continue
		}
		if !deviceConstraintsHold(d.Constraints, dg) {
			continue
		}
		m := g.Name
		if req.Share() {
			if a, _ := dg.attribute("model"); a != nil && a.StringVal != nil {
				m = *a.StringVal
			}
		}
		models = append(models, m)
	}
	return models, len(models) > 0
}

// deviceConstraintsHold reports whether device group g satisfies every
// constraint.
func deviceConstraintsHold(cs []*nomadapi.Constraint, g DeviceGroup) bool {
	for _, c := range cs {
		l, lOK := deviceTarget(c.LTarget, g)
		r, rOK := deviceTarget(c.RTarget, g)
		if !attributeHolds(c.Operand, l, r, lOK, rOK) {
			return false
		}
	}
	return true
}

// deviceTarget reads a device constraint target: a literal (with units,
// e.g. "40 GiB"), or one of ${device.model}, ${device.vendor},
// ${device.type}, ${device.ids} and ${device.attr.X}.
func deviceTarget(target string, dg DeviceGroup) (*psstructs.Attribute, bool) {
	g := dg.Resource
	if !strings.HasPrefix(target, "${") {
		return psstructs.ParseAttribute(target), true
	}
	switch {
	case target == "${device.model}":
		return psstructs.NewStringAttribute(g.Name), true
	case target == "${device.vendor}":
		return psstructs.NewStringAttribute(g.Vendor), true
	case target == "${device.type}":
		return psstructs.NewStringAttribute(g.Type), true
	case target == "${device.ids}":
		ids := ""
		if dg.IDs != nil {
			ids = dg.IDs()
		}
		return psstructs.NewStringAttribute(ids), true
	case strings.HasPrefix(target, "${device.attr."):
		a, ok := dg.attribute(strings.TrimSuffix(strings.TrimPrefix(target, "${device.attr."), "}"))
		if !ok || a == nil {
			return nil, false
		}
		return toAttribute(a), true
	}
	return nil, false
}

// toAttribute converts the API's attribute to the plugin library's, which
// compares with units.
func toAttribute(a *nomadapi.Attribute) *psstructs.Attribute {
	return &psstructs.Attribute{Float: a.FloatVal, Int: a.IntVal, String: a.StringVal, Bool: a.BoolVal, Unit: a.Unit}
}

// attributeHolds is nodeConstraintHolds for device attributes.
func attributeHolds(op string, l, r *psstructs.Attribute, lOK, rOK bool) bool {
	switch op {
	case "distinct_hosts", "distinct_property":
		return true
	case "!=", "not":
		if !lOK || !rOK {
			return lOK != rOK
		}
		c, ok := l.Compare(r)
		return ok && c != 0
	case "", "=", "==", "is", "<", "<=", ">", ">=":
		if !lOK || !rOK {
			return false
		}
		c, ok := l.Compare(r)
		return ok && holds(op, c)
	case "is_set":
		return lOK
	case "is_not_set":
		return !lOK
	}
	if !lOK || !rOK {
		return false
	}
	ls, lStr := l.GetString()
	rs, rStr := r.GetString()
	if op == "version" || op == "semver" {
		if i, ok := l.GetInt(); ok && !lStr {
			ls, lStr = strconv.FormatInt(i, 10), true
		}
	}
	if !lStr || !rStr {
		return false
	}
	switch op {
	case "version", "semver":
		return versionMatches(op, ls, rs)
	case "regexp":
		return regexpMatches(ls, rs)
	case "set_contains", "set_contains_all":
		return setContains(ls, rs, true)
	case "set_contains_any":
		return setContains(ls, rs, false)
	}
	return false
}
