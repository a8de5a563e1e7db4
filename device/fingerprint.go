package device

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/device/partition"
	"github.com/gpushare/nomad-gpushare/vocab"
	dev "github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/structs"
)

// Fingerprint streams the device groups: one "gpu" group per model, one
// "gpu-share" group per GPU, and one "gpu" group per MIG device name. A new response is sent whenever
// health or the partition changes; each group's OfferedAttr attribute then
// changes with it, so that Nomad re-evaluates jobs blocked on the node.
//
// NVML failures are logged and retried; they do not end the stream with an
// error, because Nomad's client stops a device plugin for good on a
// fingerprint error (client/devicemanager/instance.go). GPUs already known
// are then listed unhealthy with the NVML error as the reason; when none is
// known, a placeholder group UnavailableGroup carries the error.
func (p *Plugin) Fingerprint(ctx context.Context) (<-chan *dev.FingerprintResponse, error) {
	if err := p.start(); err != nil {
		return nil, err
	}
	out := make(chan *dev.FingerprintResponse)
	changed, unsubscribe := p.pub.subscribe()
	go func() {
		defer close(out)
		defer unsubscribe()
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.ctx.Done():
				return
			case <-changed:
			}
			select {
			case out <- dev.NewFingerprint(p.pub.current()...):
			case <-ctx.Done():
				return
			case <-p.ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// UnavailableGroup names the placeholder device group (one unhealthy
// instance) listed while NVML fails and no GPU is known; its HealthDesc is
// the NVML error.
const UnavailableGroup = "nvml-unavailable"

// deviceGroups builds the device groups from the hardware and the
// partition: one whole group per model, one share group per GPU, each
// instance healthy only in the family the partition publishes its GPU
// in; a MIG-enabled GPU is offered neither whole nor shared, its MIG
// devices are, in one group per MIG device name (model and profile), as
// HashiCorp's nvidia plugin does. retryEvery is the fingerprint period,
// for the NVML failure message.
func deviceGroups(hw hwView, pubs map[string]partition.Publication, iso shareIsolation, perGPU int, retryEvery time.Duration) []*dev.DeviceGroup {
	var groups []*dev.DeviceGroup
	whole := map[string]*dev.DeviceGroup{}
	mig := map[string]*dev.DeviceGroup{}
	for i := range hw.gpus {
		g := &hw.gpus[i]
		if g.MIG {
			groups = addMIGDevices(groups, mig, hw, g)
			continue
		}
		wg := whole[g.Model]
		if wg == nil {
			wg = &dev.DeviceGroup{Vendor: vocab.Vendor, Type: vocab.TypeWhole, Name: g.Model, Attributes: attributes(hw, g, vocab.SharingWhole, perGPU)}
			whole[g.Model] = wg
			groups = append(groups, wg)
		}
		healthy, desc := health(g, pubs[g.UUID], partition.Whole)
		wg.Devices = append(wg.Devices, &dev.Device{ID: g.UUID, Healthy: healthy, HealthDesc: desc, HwLocality: locality(g)})
		groups = append(groups, shareGroup(hw, g, pubs[g.UUID], iso, perGPU))
	}
	if len(hw.gpus) == 0 && hw.err != nil {
		// Nothing to list, but make the NVML failure visible in the node's
		// devices (`nomad node status -verbose`) without ending the stream.
		groups = append(groups, &dev.DeviceGroup{Vendor: vocab.Vendor, Type: vocab.TypeWhole, Name: UnavailableGroup,
			Attributes: map[string]*structs.Attribute{vocab.SharingAttr: structs.NewStringAttribute(vocab.SharingWhole)},
			Devices:    []*dev.Device{{ID: UnavailableGroup, Healthy: false, HealthDesc: fmt.Sprintf("gpushare: %v (retrying every %s)", hw.err, retryEvery)}}})
	}
	for _, g := range groups {
		setOffered(g)
	}
	return groups
}

// addMIGDevices adds the MIG devices of a MIG-enabled GPU to their groups
// (by MIG device name, in mig), creating the groups they lack.
func addMIGDevices(groups []*dev.DeviceGroup, mig map[string]*dev.DeviceGroup, hw hwView, g *hwGPU) []*dev.DeviceGroup {
	for _, m := range g.MIGDevices {
		name := migGroupName(g, m)
		mg := mig[name]
		if mg == nil {
			mg = &dev.DeviceGroup{Vendor: vocab.Vendor, Type: vocab.TypeWhole, Name: name, Attributes: migAttributes(hw, g, m)}
			mig[name] = mg
			groups = append(groups, mg)
		}
		healthy, desc := migHealth(g, m)
		mg.Devices = append(mg.Devices, &dev.Device{ID: m.UUID, Healthy: healthy, HealthDesc: desc, HwLocality: locality(g)})
	}
	return groups
}

// migGroupName is the device group of a MIG device: its NVML name (model
// and profile), as in HashiCorp's nvidia plugin.
func migGroupName(g *hwGPU, m gpu.MIGDevice) string {
	if m.Name == "" {
		return g.Model + " MIG"
	}
	return m.Name
}

// migHealth says whether a MIG device is allocatable: its GPU and itself
// must be healthy.
func migHealth(g *hwGPU, m gpu.MIGDevice) (bool, string) {
	switch {
	case !g.healthy:
		return false, g.reason
	case m.Err != nil:
		return false, "gpushare: " + m.Err.Error()
	}
	return true, ""
}

// shareGroup is the share device group of one GPU: perGPU instances
// (shares_per_gpu) of one health, unhealthy too while MPS should isolate
// them and cannot.
func shareGroup(hw hwView, g *hwGPU, pub partition.Publication, iso shareIsolation, perGPU int) *dev.DeviceGroup {
	sg := &dev.DeviceGroup{Vendor: vocab.Vendor, Type: vocab.TypeShare, Name: shareGroupName(g.GPU), Attributes: attributes(hw, g, vocab.SharingShare, perGPU)}
	sg.Attributes[IsolationAttr] = structs.NewStringAttribute(iso.mode())
	healthy, desc := health(g, pub, partition.Share)
	if healthy && iso.down != "" {
		healthy, desc = false, iso.down
	}
	sg.Devices = make([]*dev.Device, perGPU)
	for k := range sg.Devices {
		sg.Devices[k] = &dev.Device{ID: vocab.ShareOf(g.UUID, k, perGPU), Healthy: healthy, HealthDesc: desc, HwLocality: locality(g)}
	}
	return sg
}

// OfferedAttr names the device-group attribute that counts the group's
// healthy (allocatable) instances: for a whole group the GPUs of its model
// currently offered whole, for a share group SharesPerGPU while the GPU is
// in share mode and 0 while it is withdrawn or whole.
//
// It exists for Nomad's blocked evaluations. The device feasibility check
// is cached per computed node class, and a node's computed class hashes its
// device groups' vendor, type, name and attributes but not instance health
// (nomad/structs/node_class.go). An evaluation whose device request found no
// healthy instance marks the node's class ineligible, and
// BlockedEvals.Unblock skips evaluations that marked the class ineligible:
// without this attribute a job submitted while its family had no healthy
// instance (plugin start, a switch in progress, every GPU in the other
// family) stays blocked forever once the family is published. With it,
// every change of which instances are allocatable changes the computed
// class, so the node update unblocks the waiting evaluations. The device
// feasibility check depends only on attributes and healthy counts, so the
// class stays an exact cache key; the count changes only with health or the
// partition, never per fingerprint or with stats. It must stay outside the
// "unique." attribute namespace, which the class hash leaves out.
const OfferedAttr = "offered"

// setOffered sets a group's OfferedAttr from its instances' health.
func setOffered(g *dev.DeviceGroup) {
	n := 0
	for _, d := range g.Devices {
		if d.Healthy {
			n++
		}
	}
	if g.Attributes == nil {
		g.Attributes = map[string]*structs.Attribute{}
	}
	g.Attributes[OfferedAttr] = structs.NewIntAttribute(int64(n), "")
}

func locality(g *hwGPU) *dev.DeviceLocality {
	if g.PCIBusID == "" {
		return nil
	}
	return &dev.DeviceLocality{PciBusID: g.PCIBusID}
}

// health says whether a GPU's instances in family fam are allocatable.
func health(g *hwGPU, pub partition.Publication, fam partition.Mode) (bool, string) {
	switch {
	case !g.healthy:
		return false, g.reason
	case pub.Family == partition.Unknown:
		return false, pub.Reason
	case pub.Family != fam && pub.Family == partition.Share:
		return false, fmt.Sprintf("gpushare: GPU is in share mode (device group %q)", shareGroupName(g.GPU))
	case pub.Family != fam:
		return false, "gpushare: GPU is in whole mode"
	}
	return true, ""
}

// attributes are the group attributes of a GPU (for a whole group: of the
// first GPU of its model), in a group of the given sharing; a share group
// has perGPU instances.
func attributes(hw hwView, g *hwGPU, sharing string, perGPU int) map[string]*structs.Attribute {
	a := commonAttributes(hw, g, sharing)
	a["memory"] = structs.NewIntAttribute(int64(g.MemoryMiB), structs.UnitMiB)
	if g.PCIBandwidthMBps > 0 {
		a["pci_bandwidth"] = structs.NewIntAttribute(int64(g.PCIBandwidthMBps), structs.UnitMBPerS)
	}
	if g.PowerLimitW > 0 {
		a["power"] = structs.NewIntAttribute(int64(g.PowerLimitW), structs.UnitW)
	}
	if g.CoresClockMHz > 0 {
		a["cores_clock"] = structs.NewIntAttribute(int64(g.CoresClockMHz), structs.UnitMHz)
	}
	if g.MemoryClockMHz > 0 {
		a["memory_clock"] = structs.NewIntAttribute(int64(g.MemoryClockMHz), structs.UnitMHz)
	}
	if g.BAR1MiB > 0 {
		a["bar1"] = structs.NewIntAttribute(int64(g.BAR1MiB), structs.UnitMiB)
	}
	if g.CUDACores > 0 {
		a["cuda_cores"] = structs.NewIntAttribute(int64(g.CUDACores), "")
	}
	if sharing == vocab.SharingShare {
		a["uuid"] = structs.NewStringAttribute(g.UUID)
		a["index"] = structs.NewIntAttribute(int64(g.Index), "")
		a[vocab.SharesAttr] = structs.NewIntAttribute(int64(perGPU), "")
		a["share_memory"] = structs.NewIntAttribute(int64(g.MemoryMiB/uint64(perGPU)), structs.UnitMiB)
		if g.PCIBusID != "" {
			a["pci_bus_id"] = structs.NewStringAttribute(g.PCIBusID)
		}
	}
	return a
}

// migAttributes are the group attributes of a MIG device: its profile and
// memory, and its GPU's model and versions.
func migAttributes(hw hwView, g *hwGPU, m gpu.MIGDevice) map[string]*structs.Attribute {
	a := commonAttributes(hw, g, vocab.SharingMIG)
	a["memory"] = structs.NewIntAttribute(int64(m.MemoryMiB), structs.UnitMiB)
	a[IsolationAttr] = structs.NewStringAttribute(IsolationMIG)
	if m.Profile != "" {
		a["mig_profile"] = structs.NewStringAttribute(m.Profile)
	}
	if m.Shares > 0 {
		a[vocab.MIGSharesAttr] = structs.NewIntAttribute(int64(m.Shares), "")
	}
	return a
}

// commonAttributes are the attributes every group of a GPU has.
func commonAttributes(hw hwView, g *hwGPU, sharing string) map[string]*structs.Attribute {
	a := map[string]*structs.Attribute{
		"model":              structs.NewStringAttribute(g.Model),
		"compute_capability": structs.NewStringAttribute(g.ComputeCapability()),
		vocab.SharingAttr:    structs.NewStringAttribute(sharing),
	}
	if hw.driver != "" {
		a["driver_version"] = structs.NewStringAttribute(hw.driver)
	}
	if hw.cuda != "" {
		a["cuda_version"] = structs.NewStringAttribute(hw.cuda)
	}
	if g.Architecture != "" {
		a["architecture"] = structs.NewStringAttribute(g.Architecture)
	}
	return a
}

// signature is a cheap summary of what Nomad would see changing.
func signature(groups []*dev.DeviceGroup) string {
	var b strings.Builder
	for _, g := range groups {
		fmt.Fprintf(&b, "%s/%s/%s[", g.Vendor, g.Type, g.Name)
		keys := make([]string, 0, len(g.Attributes))
		for k := range g.Attributes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s=%s,", k, g.Attributes[k].GoString())
		}
		// A share group's instances share one health; one suffices.
		for i, d := range g.Devices {
			if g.Type == vocab.TypeShare && i > 0 {
				break
			}
			fmt.Fprintf(&b, "%s:%v:%s;", d.ID, d.Healthy, d.HealthDesc)
		}
		b.WriteString("]")
	}
	return b.String()
}
