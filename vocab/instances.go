package vocab

import (
	"fmt"
	"strings"
)

// The device families as Nomad sees them: vendor/type.
const (
	// Vendor is the vendor of both families.
	Vendor = "nvidia"
	// TypeWhole is the family of whole GPUs, one instance per GPU, as in
	// HashiCorp's nvidia plugin.
	TypeWhole = "gpu"
	// TypeShare is the family of GPU shares, one device group per GPU with
	// its share instances (DefaultSharesPerGPU unless configured).
	TypeShare = "gpu-share"
)

// SharingAttr is the device group attribute that says how a group of the
// plugin offers its GPUs: SharingWhole, SharingShare or SharingMIG (MIG
// devices, published under TypeWhole). Every group the plugin publishes
// has it; another plugin's nvidia groups (HashiCorp's) do not.
const SharingAttr = "sharing"

// SharesAttr is the share group attribute that says how many share
// instances the group publishes per GPU (the plugin's shares_per_gpu); a
// job's nvidia/gpu-share count is the fraction of a GPU times this number.
const SharesAttr = "shares"

// The values of SharingAttr.
const (
	SharingWhole = "whole"
	SharingShare = "share"
	SharingMIG   = "mig"
)

// MIGSharesAttr is the attribute of a SharingMIG device group that says
// what part of its GPU one MIG device of the group is, in shares (0.01 of
// a GPU): its compute slices over the GPU's (MIGShares), rounded down.
// The quota service counts a MIG device by it (docs/design.md, Units and
// device families).
const MIGSharesAttr = "gpu_shares"

// MIGShares is the part of its GPU, in shares, of a MIG device with slices
// compute slices on a GPU with gpuSlices (rounded down, so that the MIG
// devices of one GPU never add up to more than the GPU), or 0 when either
// is unknown.
func MIGShares(slices, gpuSlices int) int {
	if slices <= 0 || gpuSlices <= 0 || slices > gpuSlices {
		return 0
	}
	return slices * UnitsPerGPU / gpuSlices
}

// MIGProfileSlices is the compute slices of a MIG profile: the count
// before "c." for a compute instance profile ("1c.3g.20gb": 1), else the
// count before "g." ("3g.20gb": 3), or 0 when the profile says neither.
func MIGProfileSlices(profile string) int {
	for _, unit := range []string{"c.", "g."} {
		if i := strings.Index(profile, unit); i > 0 {
			n := 0
			for _, c := range profile[:i] {
				if c < '0' || c > '9' {
					return 0
				}
				n = n*10 + int(c-'0')
			}
			return n
		}
	}
	return 0
}

// shareSep separates the GPU UUID from the share number, unitSep the GPU
// UUID from the units of an instance that stands for more than one.
const (
	shareSep = "-s"
	unitSep  = "-u"
)

// ValidSharesPerGPU reports whether n share instances per GPU divide the
// GPU's UnitsPerGPU units evenly: n is a divisor of 100, at least 2.
func ValidSharesPerGPU(n int) bool {
	return n >= 2 && n <= UnitsPerGPU && UnitsPerGPU%n == 0
}

// Share returns the instance ID of share k (0 <= k < DefaultSharesPerGPU)
// of the GPU with the given UUID, one unit each (the default publication).
func Share(uuid string, k int) string {
	return ShareOf(uuid, k, DefaultSharesPerGPU)
}

// ShareOf returns the instance ID of share k (0 <= k < perGPU) of a GPU
// published as perGPU share instances (ValidSharesPerGPU), each of
// UnitsPerGPU/perGPU units.
func ShareOf(uuid string, k, perGPU int) string {
	return ID{UUID: uuid, Share: k, Units: UnitsPerGPU / perGPU, IsShare: true}.String()
}

// ID is a parsed instance ID.
type ID struct {
	// UUID is the physical GPU's NVML UUID.
	UUID string
	// Share is the share number when IsShare is true.
	Share int
	// Units is how many units (hundredths of the GPU) a share stands for:
	// 1 unless its ID says more ("-uWW").
	Units int
	// IsShare tells a share instance from a whole GPU.
	IsShare bool
}

// String returns the instance ID in its published form.
func (i ID) String() string {
	switch {
	case !i.IsShare:
		return i.UUID
	case i.Units > 1:
		return fmt.Sprintf("%s%s%02d%s%02d", i.UUID, unitSep, i.Units, shareSep, i.Share)
	}
	return fmt.Sprintf("%s%s%02d", i.UUID, shareSep, i.Share)
}

// Parse parses an instance ID. IDs ending in "-sNN" (two decimal digits) are
// shares, of WW units when "-uWW" precedes it (100/WW a valid shares per
// GPU) and of one unit otherwise; any other non-empty ID without
// whitespace is taken as a whole GPU UUID. Whether the GPU exists is for
// the caller to check.
func Parse(id string) (ID, error) {
	if id == "" {
		return ID{}, fmt.Errorf("empty device ID")
	}
	if strings.ContainsAny(id, " \t\r\n,") {
		return ID{}, fmt.Errorf("device ID %q contains whitespace or a comma", id)
	}
	n := len(id)
	if n > len(shareSep)+2 && id[n-4:n-2] == shareSep && isDigit(id[n-2]) && isDigit(id[n-1]) {
		uuid, units := id[:n-4], 1
		if m := len(uuid); m > len(unitSep)+2 && uuid[m-4:m-2] == unitSep && isDigit(uuid[m-2]) && isDigit(uuid[m-1]) {
			if u := int(uuid[m-2]-'0')*10 + int(uuid[m-1]-'0'); u > 1 && UnitsPerGPU%u == 0 && ValidSharesPerGPU(UnitsPerGPU/u) {
				uuid, units = uuid[:m-4], u
			}
		}
		return ID{UUID: uuid, Share: int(id[n-2]-'0')*10 + int(id[n-1]-'0'), Units: units, IsShare: true}, nil
	}
	return ID{UUID: id}, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// ShortUUID returns a short, still distinctive form of a GPU UUID (the first
// 8 hex digits after the "GPU-" or "MIG-" prefix), used in share group names.
func ShortUUID(uuid string) string {
	s := uuid
	if i := strings.IndexByte(s, '-'); i >= 0 && i < 4 {
		s = s[i+1:]
	}
	if len(s) > 8 {
		s = s[:8]
	}
	return s
}
