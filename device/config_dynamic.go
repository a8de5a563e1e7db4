package device

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Memory enforcement modes.
const (
	EnforceKill   = "kill"
	EnforceReport = "report"
)

// dynamicSettings are validated Dynamic settings.
type dynamicSettings struct {
	Dynamic
	monitorPeriod    time.Duration
	guestMoveTimeout time.Duration
	// headroom is ReclaimHeadroom as a fraction of a GPU.
	headroom float64
}

// validate checks the Dynamic settings; errors name the field and the fix.
func (d Dynamic) validate(backend string) (dynamicSettings, error) {
	s := dynamicSettings{Dynamic: d}
	var err error
	if s.monitorPeriod, err = period("monitor_period", d.MonitorPeriod, 50*time.Millisecond); err != nil {
		return s, err
	}
	if s.monitorPeriod > 10*time.Second {
		return s, &FieldError{"monitor_period", fmt.Sprintf("%s is too long: a borrower would keep an owner's memory that long", s.monitorPeriod), "use at most 10s (default 500ms)"}
	}
	if s.guestMoveTimeout, err = period("guest_move_timeout", d.GuestMoveTimeout, time.Second); err != nil {
		return s, err
	}
	h, err := strconv.ParseFloat(strings.TrimSpace(d.ReclaimHeadroom), 64)
	if err != nil || h <= 0 || h > 1 {
		return s, &FieldError{"reclaim_headroom", fmt.Sprintf("%q is not a fraction of a GPU above 0 and at most 1", d.ReclaimHeadroom), `use e.g. "0.1" (every tenant below its request may grow by a tenth of the GPU at once) or "1.0" (borrowers use only memory nobody requested)`}
	}
	s.headroom = h
	switch d.MemoryEnforcement {
	case EnforceKill, EnforceReport:
	default:
		return s, &FieldError{"memory_enforcement", fmt.Sprintf("unknown mode %q", d.MemoryEnforcement), `use "kill" (tenants above their limit, or borrowing memory another tenant's request needs, are killed) or "report" (only logged and counted)`}
	}
	if d.UsageListen != "" {
		if _, _, err := net.SplitHostPort(d.UsageListen); err != nil {
			return s, &FieldError{"usage_listen", fmt.Sprintf("%q is not host:port", d.UsageListen), `use an address such as ":9410" or "127.0.0.1:9410"`}
		}
	}
	if d.SimulatedProcessDir != "" && (backend != BackendSimulated || !filepath.IsAbs(d.SimulatedProcessDir)) {
		return s, &FieldError{"simulated_process_dir", fmt.Sprintf("%q is not an absolute path used with backend \"simulated\"", d.SimulatedProcessDir), "give an absolute directory, with backend = \"simulated\", that gpushare-simload tasks write to (-state-dir)"}
	}
	return s, nil
}
