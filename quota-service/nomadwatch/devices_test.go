package nomadwatch

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/internal/feasible"
	"github.com/gpushare/nomad-gpushare/vocab"
	nomadapi "github.com/hashicorp/nomad/api"
)

// TestDeviceGroupKeepsInstanceIDs checks that the cache's short form of a
// device group's instance IDs gives back exactly the IDs Nomad showed, in
// order, so that ${device.ids} constraints read the same, and that a share
// group takes one run per GPU.
func TestDeviceGroupKeepsInstanceIDs(t *testing.T) {
	shares := func(perGPU int, uuids ...string) []string {
		var out []string
		for _, u := range uuids {
			for k := range perGPU {
				out = append(out, vocab.ShareOf(u, k, perGPU))
			}
		}
		return out
	}
	tests := []struct {
		name string
		ids  []string
		runs int
	}{
		{name: "shares at 100 per GPU", ids: shares(100, "GPU-1", "GPU-2"), runs: 2},
		{name: "shares at 4 per GPU", ids: shares(4, "GPU-1", "GPU-2", "GPU-3"), runs: 3},
		{name: "whole GPUs", ids: []string{"GPU-b", "GPU-a"}, runs: 2},
		{name: "gaps, repeats and other plugins' IDs", ids: []string{"a-s05", "a-s07", "a-s08", "a-s08", "b-u01-s00", "b-u03-s01", "mig-1", "x-s1", "a-u25-s00", "a-u25-s01", "a-s02"}, runs: 9},
		{name: "empty", ids: nil, runs: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &nomadapi.NodeDeviceResource{Vendor: "other", Type: "gpu", Name: "g"}
			for _, id := range tt.ids {
				g.Instances = append(g.Instances, &nomadapi.NodeDevice{ID: id})
			}
			dg := newDeviceGroup(g)
			if got, want := dg.joinedIDs(), strings.Join(tt.ids, ","); got != want {
				t.Errorf("joined IDs %q, want %q", got, want)
			}
			if dg.instances != len(tt.ids) || len(dg.ids) != tt.runs {
				t.Errorf("%d instances in %d runs, want %d in %d", dg.instances, len(dg.ids), len(tt.ids), tt.runs)
			}
			if dg.res.Instances != nil || len(g.Instances) != len(tt.ids) {
				t.Error("the group kept its instance list, or the node's lost its own")
			}
		})
	}
}

// TestGroupsShareEqualAttributes checks that share groups alike but for
// their GPU hold one attribute map, each keeping its per-GPU attributes,
// and that groups whose attributes differ in anything else do not.
func TestGroupsShareEqualAttributes(t *testing.T) {
	str := func(s string) *nomadapi.Attribute { return &nomadapi.Attribute{StringVal: &s} }
	num := func(v int64, unit string) *nomadapi.Attribute { return &nomadapi.Attribute{IntVal: &v, Unit: unit} }
	group := func(uuid string, index int64, extra map[string]*nomadapi.Attribute) *nomadapi.NodeDeviceResource {
		attrs := map[string]*nomadapi.Attribute{"model": str("H100"), "memory": num(81559, "MiB"), "uuid": str(uuid), "index": num(index, "")}
		maps.Copy(attrs, extra)
		return &nomadapi.NodeDeviceResource{Vendor: "nvidia", Type: "gpu-share", Name: "H100-" + uuid, Attributes: attrs}
	}
	same := func(a, b map[string]*nomadapi.Attribute) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	base := newDeviceGroup(group("GPU-1", 0, nil))
	if _, ok := base.res.Attributes["uuid"]; ok || len(base.res.Attributes) != 2 {
		t.Errorf("shared attributes %v, want model and memory only", slices.Sorted(maps.Keys(base.res.Attributes)))
	}
	tests := []struct {
		name  string
		group *nomadapi.NodeDeviceResource
		share bool
	}{
		{name: "another GPU", group: group("GPU-2", 1, nil), share: true},
		{name: "another memory", group: group("GPU-2", 1, map[string]*nomadapi.Attribute{"memory": num(40960, "MiB")})},
		{name: "another unit", group: group("GPU-2", 1, map[string]*nomadapi.Attribute{"memory": num(81559, "MB")})},
		{name: "a string that ends where a unit begins", group: group("GPU-2", 1, map[string]*nomadapi.Attribute{"model": {StringVal: ptr("H1"), Unit: "00"}})},
		{name: "one more attribute", group: group("GPU-2", 1, map[string]*nomadapi.Attribute{"isolation": str("mps")})},
		{name: "an attribute without value", group: group("GPU-2", 1, map[string]*nomadapi.Attribute{"isolation": nil})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newDeviceGroup(tt.group)
			if got := same(g.res.Attributes, base.res.Attributes); got != tt.share {
				t.Errorf("shares the first group's map: %v, want %v", got, tt.share)
			}
			want := []feasible.NamedAttribute{{Name: "index", Value: tt.group.Attributes["index"]}, {Name: "uuid", Value: tt.group.Attributes["uuid"]}}
			if !slices.Equal(g.own, want) {
				t.Errorf("own attributes %+v, want %+v", g.own, want)
			}
			for k, a := range tt.group.Attributes {
				if _, perGPU := map[string]bool{"uuid": true, "index": true}[k]; !perGPU && g.res.Attributes[k] != a && !reflect.DeepEqual(g.res.Attributes[k], a) {
					t.Errorf("attribute %s is %+v, want %+v", k, g.res.Attributes[k], a)
				}
			}
		})
	}
}
