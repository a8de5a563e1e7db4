// Package ids encodes and parses the device instance IDs that the gpushare
// plugin publishes to Nomad.
//
// A whole GPU is published under its NVML UUID (for example
// "GPU-5b2e0c8a-..."). Each of its 100 shares is published as
// "<UUID>-sNN" with NN in 00..99, so that every instance ID names the
// physical GPU it belongs to and Reserve can validate a request from the IDs
// alone.
package ids

import (
	"fmt"
	"strings"
)

// SharesPerGPU is the number of share instances published per GPU; one
// share is 1% of the GPU's memory and compute.
const SharesPerGPU = 100

// shareSep separates the GPU UUID from the share number.
const shareSep = "-s"

// Share returns the instance ID of share k (0 <= k < SharesPerGPU) of the
// GPU with the given UUID.
func Share(uuid string, k int) string {
	return fmt.Sprintf("%s%s%02d", uuid, shareSep, k)
}

// ID is a parsed instance ID.
type ID struct {
	// UUID is the physical GPU's NVML UUID.
	UUID string
	// Share is the share number when IsShare is true.
	Share int
	// IsShare tells a share instance from a whole GPU.
	IsShare bool
}

// String returns the instance ID in its published form.
func (i ID) String() string {
	if i.IsShare {
		return Share(i.UUID, i.Share)
	}
	return i.UUID
}

// Parse parses an instance ID. IDs ending in "-sNN" (two decimal digits) are
// shares; any other non-empty ID without whitespace is taken as a whole GPU
// UUID. Whether the GPU exists is for the caller to check.
func Parse(id string) (ID, error) {
	if id == "" {
		return ID{}, fmt.Errorf("empty device ID")
	}
	if strings.ContainsAny(id, " \t\r\n,") {
		return ID{}, fmt.Errorf("device ID %q contains whitespace or a comma", id)
	}
	n := len(id)
	if n > len(shareSep)+2 && id[n-4:n-2] == shareSep && isDigit(id[n-2]) && isDigit(id[n-1]) {
		uuid := id[:n-4]
		return ID{UUID: uuid, Share: int(id[n-2]-'0')*10 + int(id[n-1]-'0'), IsShare: true}, nil
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

// Request is a parsed device request name of a job, as Nomad accepts it:
// "type", "vendor/type" or "vendor/type/name" (the group name may itself
// hold slashes). Empty fields were not given.
type Request struct {
	Vendor, Type, Name string
}

// ParseRequest splits a job's device request name into its parts.
func ParseRequest(name string) Request {
	parts := strings.SplitN(name, "/", 3)
	switch len(parts) {
	case 1:
		return Request{Type: parts[0]}
	case 2:
		return Request{Vendor: parts[0], Type: parts[1]}
	default:
		return Request{Vendor: parts[0], Type: parts[1], Name: parts[2]}
	}
}
