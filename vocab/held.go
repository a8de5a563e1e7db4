package vocab

import "slices"

// Held is what one allocation holds of the gpushare device families.
type Held struct {
	// Whole are the UUIDs of the GPUs it holds whole, sorted.
	Whole []string
	// Shares counts the units (hundredths of a GPU) of the share instances
	// it holds, by GPU UUID: one per instance unless the instance IDs say
	// more (a plugin with shares_per_gpu below 100). Nil when it holds no
	// share; read only.
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
