package vocab

import (
	"fmt"
	"strings"
)

// The health descriptions of a GPU the plugin withdraws from both device
// families on purpose, only to move it or to learn where it belongs: it
// comes back in one family within seconds, so the quota service counts it
// as capacity (docs/design.md, Projects and fair share). They are the one
// contract between the plugin (device/partition publishes them) and the
// quota service (quota-service/nomadwatch recognises them with
// IsWithdrawn): both sides use these functions, never the texts. Any other
// health description of an unhealthy GPU (an NVML error, an Xid, a GPU no
// longer reported, a view the plugin cannot prove complete, another
// plugin's reason) makes the GPU unavailable.
//
// The texts are kept as earlier plugins wrote them, so that a quota
// service reads the plugins of a cluster being upgraded alike.

// WithdrawnPrefix starts every withdrawal's description.
const WithdrawnPrefix = "gpushare: "

// The kinds of withdrawal, each its description's start after
// WithdrawnPrefix.
const (
	withdrawnWaiting   = "waiting to read GPU usage"
	withdrawnSettling  = "settling before first publication"
	withdrawnConflict  = "GPU is held both whole and shared"
	withdrawnSwitching = "switching to "
)

var withdrawnKinds = []string{withdrawnWaiting, withdrawnSettling, withdrawnConflict, withdrawnSwitching}

// WithdrawnWaiting describes a GPU withdrawn until the plugin has read the
// node's allocations once.
func WithdrawnWaiting() string {
	return WithdrawnPrefix + withdrawnWaiting + " from the Nomad API"
}

// WithdrawnSettling describes an idle GPU withdrawn before its first
// publication, in family target.
func WithdrawnSettling(target string) string {
	return fmt.Sprintf("%s%s in %s mode", WithdrawnPrefix, withdrawnSettling, target)
}

// WithdrawnConflict describes a GPU held both whole and shared (a
// placement raced a switch), withdrawn until one side ends.
func WithdrawnConflict() string {
	return WithdrawnPrefix + withdrawnConflict + "; withdrawn until one side ends"
}

// WithdrawnSwitching describes a GPU being switched to family target, in
// the given phase of the switch.
func WithdrawnSwitching(target, phase string) string {
	return fmt.Sprintf("%s%s%s mode (%s)", WithdrawnPrefix, withdrawnSwitching, target, phase)
}

// IsWithdrawn reports whether a health description is one of the plugin's
// withdrawals (see WithdrawnWaiting and the others).
func IsWithdrawn(desc string) bool {
	rest, ok := strings.CutPrefix(desc, WithdrawnPrefix)
	if !ok {
		return false
	}
	for _, k := range withdrawnKinds {
		if strings.HasPrefix(rest, k) {
			return true
		}
	}
	return false
}
