package ids

import (
	"slices"
	"testing"

	"github.com/hashicorp/nomad/api"
)

func TestHeldDevices(t *testing.T) {
	const a, b = "GPU-aaaa", "GPU-bbbb"
	res := &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
		"train": {Devices: []*api.AllocatedDeviceResource{
			{Vendor: Vendor, Type: TypeWhole, DeviceIDs: []string{b, a}},
			{Vendor: "amd", Type: TypeWhole, DeviceIDs: []string{"GPU-cccc"}},
		}},
		"sidecar": {Devices: []*api.AllocatedDeviceResource{
			{Vendor: Vendor, Type: TypeShare, DeviceIDs: []string{Share(a, 0), Share(a, 1), Share(b, 7)}},
			// A share ID given in the whole family is not ours to count.
			{Vendor: Vendor, Type: TypeWhole, DeviceIDs: []string{Share(b, 8)}},
		}},
		"idle": nil,
	}}
	h := HeldDevices(res)
	if !slices.Equal(h.Whole, []string{a, b}) {
		t.Errorf("Whole = %v, want [%s %s]", h.Whole, a, b)
	}
	if h.Shares[a] != 2 || h.Shares[b] != 1 || len(h.Shares) != 2 {
		t.Errorf("Shares = %v, want %s:2 %s:1", h.Shares, a, b)
	}
	if got := h.ShareUUIDs(); !slices.Equal(got, []string{a, b}) {
		t.Errorf("ShareUUIDs = %v", got)
	}
	if !HeldDevices(nil).Empty() {
		t.Error("nil resources hold something")
	}
}

// TestHeldDevicesCountsUnits: an allocation given instances of a plugin
// with 4 shares per GPU holds 25 units per instance.
func TestHeldDevicesCountsUnits(t *testing.T) {
	const a = "GPU-aaaa"
	res := &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
		"train": {Devices: []*api.AllocatedDeviceResource{
			{Vendor: Vendor, Type: TypeShare, DeviceIDs: []string{ShareOf(a, 0, 4), ShareOf(a, 3, 4)}},
		}},
	}}
	if got := HeldDevices(res).Shares[a]; got != 50 {
		t.Errorf("Shares[%s] = %d units, want 50 (two instances of 25)", a, got)
	}
}

func TestShareUnit(t *testing.T) {
	group := func(typ string, shares int64) *api.NodeDeviceResource {
		return &api.NodeDeviceResource{Vendor: Vendor, Type: typ, Attributes: map[string]*api.Attribute{SharesAttr: {IntVal: &shares}}}
	}
	tests := []struct {
		name string
		devs []*api.NodeDeviceResource
		want int
	}{
		{"default publication", []*api.NodeDeviceResource{group(TypeWhole, 0), group(TypeShare, 100)}, 1},
		{"4 per GPU", []*api.NodeDeviceResource{group(TypeShare, 4)}, 25},
		{"no share group", []*api.NodeDeviceResource{group(TypeWhole, 4)}, 1},
		{"invalid count", []*api.NodeDeviceResource{group(TypeShare, 30)}, 1},
		{"nothing", nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ShareUnit(tt.devs); got != tt.want {
				t.Errorf("ShareUnit = %d, want %d", got, tt.want)
			}
		})
	}
}
