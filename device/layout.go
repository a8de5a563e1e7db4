package device

import (
	"fmt"

	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/device/partition"
	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/hashicorp/nomad/api"
	dev "github.com/hashicorp/nomad/plugins/device"
)

// SimulatedLayout returns the device groups the plugin publishes on a
// simulated machine (o) with perGPU share instances per GPU
// (shares_per_gpu), its first shareGPUs GPUs in the share family and the
// others whole: the publication code the plugin runs, without a Nomad
// agent. Benchmarks and the scale stand-in (internal/nomadstandin) build
// their nodes from it.
func SimulatedLayout(o gpu.SimOptions, perGPU, shareGPUs int) ([]*dev.DeviceGroup, error) {
	if !vocab.ValidSharesPerGPU(perGPU) {
		return nil, fmt.Errorf("shares per GPU %d: use a divisor of 100 from 2 to 100", perGPU)
	}
	sim, err := gpu.NewSimulated(o)
	if err != nil {
		return nil, err
	}
	inv, err := gpu.NewSource(sim).Inventory()
	if err != nil {
		return nil, fmt.Errorf("reading the simulated GPUs: %w", err)
	}
	hw := hwView{driver: inv.DriverVersion, cuda: inv.CUDAVersion}
	pubs := map[string]partition.Publication{}
	for i, g := range inv.GPUs {
		hw.gpus = append(hw.gpus, hwGPU{GPU: g, healthy: true})
		fam := partition.Whole
		if i < shareGPUs {
			fam = partition.Share
		}
		pubs[g.UUID] = partition.Publication{Family: fam}
	}
	return deviceGroups(hw, pubs, shareIsolation{}, perGPU, 0), nil
}

// NodeDevices converts device groups to the node devices Nomad's API
// shows for them (what the client's device manager registers).
func NodeDevices(groups []*dev.DeviceGroup) []*api.NodeDeviceResource {
	out := make([]*api.NodeDeviceResource, 0, len(groups))
	for _, g := range groups {
		r := &api.NodeDeviceResource{Vendor: g.Vendor, Type: g.Type, Name: g.Name, Attributes: map[string]*api.Attribute{}}
		for k, a := range g.Attributes {
			r.Attributes[k] = &api.Attribute{FloatVal: a.Float, IntVal: a.Int, StringVal: a.String, BoolVal: a.Bool, Unit: a.Unit}
		}
		for _, d := range g.Devices {
			nd := &api.NodeDevice{ID: d.ID, Healthy: d.Healthy, HealthDescription: d.HealthDesc}
			if d.HwLocality != nil {
				nd.Locality = &api.NodeDeviceLocality{PciBusID: d.HwLocality.PciBusID}
			}
			r.Instances = append(r.Instances, nd)
		}
		out = append(out, r)
	}
	return out
}
