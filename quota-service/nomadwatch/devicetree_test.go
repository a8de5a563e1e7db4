package nomadwatch

import (
	"encoding/json"
	"reflect"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

// sameAsJSON checks that decodeNodeTree reads tree as encoding/json does:
// the same node, or an error where encoding/json fails.
func sameAsJSON(t *testing.T, name string, tree map[string]any) {
	t.Helper()
	want, wantErr := decodeValue[nomadapi.Node](tree, "Node")
	got, err := decodeNodeTree(tree)
	switch {
	case wantErr != nil && err == nil:
		t.Errorf("%s: decoded although encoding/json fails (%v)", name, wantErr)
	case wantErr == nil && err != nil:
		t.Errorf("%s: %v, but encoding/json decodes it", name, err)
	case wantErr == nil && !reflect.DeepEqual(got, want):
		t.Errorf("%s: decodes to\n%+v\nwant (encoding/json)\n%+v", name, got.NodeResources, want.NodeResources)
	}
}

// TestDecodeNodeTree: the device groups read from the tree directly give
// the node encoding/json gives, for the plugin's layout and for trees it
// must hand to encoding/json (a key in another case, a number that is not
// an int64, a field of another type, nulls).
func TestDecodeNodeTree(t *testing.T) {
	node := scaleNode(t)
	g := node.NodeResources.Devices[0]
	f, i, b := 1.5, int64(-7), true
	g.Attributes["f"] = &nomadapi.Attribute{FloatVal: &f, Unit: "GHz"}
	g.Attributes["i"] = &nomadapi.Attribute{IntVal: &i}
	g.Attributes["b"] = &nomadapi.Attribute{BoolVal: &b}
	g.Attributes["nil"] = nil
	g.Instances[0].Locality = &nomadapi.NodeDeviceLocality{PciBusID: "0000:3b:00.0"}
	g.Instances[1].Healthy, g.Instances[1].HealthDescription = false, "withdrawn"
	tree := wire(t, "Node", node)["Node"].(map[string]any)
	sameAsJSON(t, "the plugin's layout", tree)

	devices := func(tr map[string]any) []any { return tr["NodeResources"].(map[string]any)["Devices"].([]any) }
	group := func(tr map[string]any) map[string]any { return devices(tr)[0].(map[string]any) }
	instance := func(tr map[string]any) map[string]any { return group(tr)["Instances"].([]any)[0].(map[string]any) }
	attr := func(tr map[string]any, name string) map[string]any {
		return group(tr)["Attributes"].(map[string]any)[name].(map[string]any)
	}
	tests := []struct {
		name   string
		change func(tr map[string]any)
	}{
		{"a key in another case", func(tr map[string]any) { instance(tr)["healthy"] = false }},
		{"both spellings of a group's field", func(tr map[string]any) { tr["NodeResources"].(map[string]any)["devices"] = []any{} }},
		{"an Int with a fraction", func(tr map[string]any) { attr(tr, "i")["Int"] = 1.5 }},
		{"an Int past int64", func(tr map[string]any) { attr(tr, "i")["Int"] = 1e19 }},
		{"an Int past 1e21", func(tr map[string]any) { attr(tr, "i")["Int"] = 1e22 }},
		{"a string where a bool goes", func(tr map[string]any) { instance(tr)["Healthy"] = "yes" }},
		{"null fields", func(tr map[string]any) {
			instance(tr)["ID"], instance(tr)["Locality"], attr(tr, "f")["Unit"] = nil, nil, nil
		}},
		{"a null group and instance", func(tr map[string]any) {
			d := devices(tr)
			d[len(d)-1] = nil
			group(tr)["Instances"].([]any)[1] = nil
		}},
		{"no device groups", func(tr map[string]any) { tr["NodeResources"].(map[string]any)["Devices"] = []any{} }},
		{"null device groups", func(tr map[string]any) { tr["NodeResources"].(map[string]any)["Devices"] = nil }},
		{"no resources", func(tr map[string]any) { delete(tr, "NodeResources") }},
		{"resources of another type", func(tr map[string]any) { tr["NodeResources"] = "none" }},
	}
	for _, tt := range tests {
		tr := wire(t, "Node", node)["Node"].(map[string]any)
		tt.change(tr)
		sameAsJSON(t, tt.name, tr)
	}
}

// FuzzDecodeNodeTree: any JSON object read as a node payload decodes as
// encoding/json decodes it.
func FuzzDecodeNodeTree(f *testing.F) {
	f.Add([]byte(`{"NodeResources":{"Devices":[{"Vendor":"nvidia","Instances":[{"ID":"a","Healthy":true}],"Attributes":{"m":{"Int":3,"Unit":"MiB"}}}]}}`))
	f.Add([]byte(`{"NodeResources":{"Devices":[{"instances":[{"ID":"a","Locality":{"PciBusID":"x"}}]}]},"Name":"n"}`))
	f.Add([]byte(`{"NodeResources":{"Devices":[null,{"Attributes":{"a":null,"b":{"Float":2.5,"Bool":false}}}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var tree map[string]any
		if json.Unmarshal(data, &tree) != nil || tree == nil {
			return
		}
		sameAsJSON(t, string(data), tree)
	})
}
