package vocab

import "strings"

// Request is one device request of a task, as Nomad reads its name:
// "type", "vendor/type" or "vendor/type/name" (the group name may itself
// hold slashes). Empty fields were not given.
type Request struct {
	Vendor, Type, Name string
	// Count is the number of instances asked for; Nomad's default is 1.
	Count int
}

// ParseRequestName splits a device request name into its parts; Count is
// left at zero.
func ParseRequestName(name string) Request {
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

// Whole reports whether the request asks for whole GPUs of the gpushare
// families (vendor nvidia or none, type gpu).
func (r Request) Whole() bool { return r.ours() && r.Type == TypeWhole }

// Share reports whether the request asks for GPU shares (vendor nvidia or
// none, type gpu-share).
func (r Request) Share() bool { return r.ours() && r.Type == TypeShare }

func (r Request) ours() bool { return r.Vendor == "" || r.Vendor == Vendor }
