package nomadwatch

import (
	"math"
	"strings"

	nomadapi "github.com/hashicorp/nomad/api"
)

// decodeNodeTree decodes a node payload as the API client left it (maps,
// slices, float64s). Its device groups, most of a GPU node (808 device
// instances at 8 GPUs and 100 shares each), are read from the tree
// directly (deviceGroupsOf); the rest goes through encoding/json
// (decodeValue). A tree the direct reading does not recognize exactly
// (a field of another type, a key spelled otherwise, a number that is not
// an int64) is decoded through encoding/json in full, so that both ways
// give the same node.
func decodeNodeTree(raw map[string]any) (*nomadapi.Node, error) {
	resTree, hasRes := raw["NodeResources"].(map[string]any)
	groups, ok := deviceGroupsOf(resTree["Devices"])
	if !hasRes || !ok || !onlyKey(raw, "NodeResources") || !onlyKey(resTree, "Devices") {
		return decodeValue[nomadapi.Node](raw, "Node")
	}
	n, err := decodeValue[nomadapi.Node](without(raw, "NodeResources"), "Node")
	if err != nil {
		return nil, err
	}
	res, err := decodeValue[nomadapi.NodeResources](without(resTree, "Devices"), "Node.NodeResources")
	if err != nil {
		return nil, err
	}
	res.Devices = groups
	n.NodeResources = res
	return n, nil
}

// onlyKey says that no other key of m names the field key for
// encoding/json, which matches names regardless of case.
func onlyKey(m map[string]any, key string) bool {
	for k := range m {
		if k != key && strings.EqualFold(k, key) {
			return false
		}
	}
	return true
}

// without is m less key, sharing its values.
func without(m map[string]any, key string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// deviceGroupsOf reads NodeResources.Devices from its tree; false when
// the tree holds anything encoding/json would read otherwise.
func deviceGroupsOf(v any) ([]*nomadapi.NodeDeviceResource, bool) {
	return listOf(v, deviceGroupOf)
}

// listOf reads a JSON array of objects, each with read (a null element is
// a nil pointer, as encoding/json leaves it).
func listOf[T any](v any, read func(map[string]any) (*T, bool)) ([]*T, bool) {
	if v == nil {
		return nil, true
	}
	list, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]*T, len(list))
	for i, e := range list {
		if e == nil {
			continue
		}
		m, ok := e.(map[string]any)
		if !ok {
			return nil, false
		}
		if out[i], ok = read(m); !ok {
			return nil, false
		}
	}
	return out, true
}

func deviceGroupOf(m map[string]any) (*nomadapi.NodeDeviceResource, bool) {
	g := &nomadapi.NodeDeviceResource{}
	for k, v := range m {
		ok := true
		switch k {
		case "Vendor":
			ok = setString(&g.Vendor, v)
		case "Type":
			ok = setString(&g.Type, v)
		case "Name":
			ok = setString(&g.Name, v)
		case "Instances":
			g.Instances, ok = listOf(v, deviceInstanceOf)
		case "Attributes":
			g.Attributes, ok = attributesOf(v)
		default:
			ok = false // encoding/json may match it to a field, case aside
		}
		if !ok {
			return nil, false
		}
	}
	return g, true
}

func deviceInstanceOf(m map[string]any) (*nomadapi.NodeDevice, bool) {
	d := &nomadapi.NodeDevice{}
	for k, v := range m {
		ok := true
		switch k {
		case "ID":
			ok = setString(&d.ID, v)
		case "Healthy":
			ok = setBool(&d.Healthy, v)
		case "HealthDescription":
			ok = setString(&d.HealthDescription, v)
		case "Locality":
			d.Locality, ok = localityOf(v)
		default:
			ok = false
		}
		if !ok {
			return nil, false
		}
	}
	return d, true
}

func localityOf(v any) (*nomadapi.NodeDeviceLocality, bool) {
	if v == nil {
		return nil, true
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, false
	}
	l := &nomadapi.NodeDeviceLocality{}
	for k, v := range m {
		if k != "PciBusID" || !setString(&l.PciBusID, v) {
			return nil, false
		}
	}
	return l, true
}

func attributesOf(v any) (map[string]*nomadapi.Attribute, bool) {
	if v == nil {
		return nil, true
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, false
	}
	out := make(map[string]*nomadapi.Attribute, len(m))
	for name, e := range m {
		if e == nil {
			out[name] = nil
			continue
		}
		am, ok := e.(map[string]any)
		if !ok {
			return nil, false
		}
		if out[name], ok = attributeOf(am); !ok {
			return nil, false
		}
	}
	return out, true
}

// attributeOf reads one attribute; its JSON names are Float, Int, String,
// Bool and Unit.
func attributeOf(m map[string]any) (*nomadapi.Attribute, bool) {
	a := &nomadapi.Attribute{}
	for k, v := range m {
		if v == nil {
			if k != "Float" && k != "Int" && k != "String" && k != "Bool" && k != "Unit" {
				return nil, false
			}
			continue // null leaves the field as it is
		}
		switch k {
		case "Float":
			f, ok := v.(float64)
			if !ok {
				return nil, false
			}
			a.FloatVal = &f
		case "Int":
			i, ok := int64Of(v)
			if !ok {
				return nil, false
			}
			a.IntVal = &i
		case "String":
			s, ok := v.(string)
			if !ok {
				return nil, false
			}
			a.StringVal = &s
		case "Bool":
			b, ok := v.(bool)
			if !ok {
				return nil, false
			}
			a.BoolVal = &b
		case "Unit":
			if !setString(&a.Unit, v) {
				return nil, false
			}
		default:
			return nil, false
		}
	}
	return a, true
}

// int64Of is v as an int64 when it is a float64 that encoding/json, given
// it again, reads as that int64 (integral, and written without an
// exponent: under 1e21 in magnitude, and inside int64's range).
func int64Of(v any) (int64, bool) {
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
		return 0, false
	}
	return int64(f), true
}

// setString sets *dst to v, a string or null (which leaves it).
func setString(dst *string, v any) bool {
	switch s := v.(type) {
	case nil:
		return true
	case string:
		*dst = s
		return true
	}
	return false
}

// setBool sets *dst to v, a bool or null (which leaves it).
func setBool(dst *bool, v any) bool {
	switch b := v.(type) {
	case nil:
		return true
	case bool:
		*dst = b
		return true
	}
	return false
}
