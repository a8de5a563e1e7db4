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
