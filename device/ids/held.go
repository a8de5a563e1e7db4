package ids

import (
	"slices"

	"github.com/hashicorp/nomad/api"
)

// Held is what one allocation holds of the gpushare device families.
type Held struct {
	// Whole are the UUIDs of the GPUs it holds whole, sorted.
	Whole []string
	// Shares counts the units (hundredths of a GPU) of the share instances
	// it holds, by GPU UUID: one per instance unless the instance IDs say
	// more (a plugin with shares_per_gpu below 100).
	Shares map[string]int
}

// Empty reports whether the allocation holds no gpushare device.
func (h Held) Empty() bool { return len(h.Whole) == 0 && len(h.Shares) == 0 }

// ShareUUIDs returns the UUIDs of the GPUs it holds shares of, sorted.
func (h Held) ShareUUIDs() []string {
	out := make([]string, 0, len(h.Shares))
	for u := range h.Shares {
		out = append(out, u)
	}
	slices.Sort(out)
	return out
}

// ShareUnit is how many units one share instance of a node's device groups
// stands for: SharesPerGPU over the SharesAttr of its share groups, 1 when
// none says (a plugin before shares_per_gpu, or no share group).
func ShareUnit(devs []*api.NodeDeviceResource) int {
	for _, g := range devs {
		if g == nil || g.Vendor != Vendor || g.Type != TypeShare {
			continue
		}
		if a := g.Attributes[SharesAttr]; a != nil && a.IntVal != nil && ValidSharesPerGPU(int(*a.IntVal)) {
			return SharesPerGPU / int(*a.IntVal)
		}
	}
	return 1
}

// HeldDevices reads which GPUs an allocation's tasks were given: whole GPUs
// from instances of Vendor/TypeWhole, shares from instances of
// Vendor/TypeShare. Instance IDs that do not parse, or that do not belong
// to the family they were given in, are left out.
func HeldDevices(r *api.AllocatedResources) Held {
	h := Held{Shares: map[string]int{}}
	if r == nil {
		return h
	}
	for _, tr := range r.Tasks {
		if tr == nil {
			continue
		}
		for _, d := range tr.Devices {
			if d == nil || d.Vendor != Vendor {
				continue
			}
			for _, raw := range d.DeviceIDs {
				id, err := Parse(raw)
				switch {
				case err != nil:
				case d.Type == TypeWhole && !id.IsShare:
					if !slices.Contains(h.Whole, id.UUID) {
						h.Whole = append(h.Whole, id.UUID)
					}
				case d.Type == TypeShare && id.IsShare:
					h.Shares[id.UUID] += id.Units
				}
			}
		}
	}
	slices.Sort(h.Whole)
	return h
}
