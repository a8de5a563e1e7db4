package vocab

import (
	"slices"
	"strings"
)

// Held is what one allocation holds of the gpushare device families.
type Held struct {
	// Whole are the UUIDs of the GPUs it holds whole, sorted.
	Whole []string
	// Shares are the GPUs it holds shares of, sorted by UUID. A slice,
	// not a map: a cluster's reader keeps one Held per allocation, and
	// most hold shares of one GPU.
	Shares []HeldShares
}

// HeldShares counts the units (hundredths of a GPU) of the share instances
// an allocation holds of one GPU: one per instance unless the instance IDs
// say more (a plugin with shares_per_gpu below 100).
type HeldShares struct {
	UUID  string
	Units int
}

// Empty reports whether the allocation holds no gpushare device.
func (h Held) Empty() bool { return len(h.Whole) == 0 && len(h.Shares) == 0 }

// ShareUnits is how many units it holds of GPU uuid's shares.
func (h Held) ShareUnits(uuid string) int {
	if i, ok := slices.BinarySearchFunc(h.Shares, uuid, byUUID); ok {
		return h.Shares[i].Units
	}
	return 0
}

// AddShares adds units of GPU uuid's shares, keeping Shares sorted.
func (h *Held) AddShares(uuid string, units int) {
	i, ok := slices.BinarySearchFunc(h.Shares, uuid, byUUID)
	if ok {
		h.Shares[i].Units += units
		return
	}
	h.Shares = slices.Insert(h.Shares, i, HeldShares{UUID: uuid, Units: units})
}

// byUUID orders shares by their GPU's UUID, for a binary search.
func byUUID(s HeldShares, uuid string) int { return strings.Compare(s.UUID, uuid) }
