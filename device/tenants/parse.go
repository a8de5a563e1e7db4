// Package tenants tells which Nomad allocation and task a GPU process
// belongs to, from what the kernel shows of the process: its environment
// (/proc/<pid>/environ: NOMAD_ALLOC_ID and NOMAD_TASK_NAME, which Nomad
// sets for every task driver), else its cgroup (/proc/<pid>/cgroup: the
// raw_exec and exec drivers put a task in "<alloc ID>.<task>" under
// Nomad's cgroup parent), and when it started (/proc/<pid>/stat), so that
// a PID that NVML lists can be charged to a tenant and signalled without
// hitting a recycled PID.
//
// Coverage: raw_exec, exec and docker tasks (their processes are host
// processes; the plugin runs on the host as root and reads their /proc
// entries). A process that rewrote its environment is still found through
// its cgroup under raw_exec and exec; under docker it is reported as
// belonging to no allocation. docs/design.md, "Dynamic fractions and the
// node-level scheduler", states the rules.
package tenants

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Owner is the Nomad task a process belongs to. The zero Owner means none
// was found.
type Owner struct {
	AllocID   string
	Task      string
	Namespace string // from the environment only
	Job       string // from the environment only
	// Source is how it was found: "environ" or "cgroup".
	Source string
}

// Known reports whether the process belongs to an allocation.
func (o Owner) Known() bool { return o.AllocID != "" }

// Environment variables Nomad sets for every task (and its children).
const (
	envAllocID   = "NOMAD_ALLOC_ID"
	envTask      = "NOMAD_TASK_NAME"
	envNamespace = "NOMAD_NAMESPACE"
	envJob       = "NOMAD_JOB_ID"
)

// ParseEnviron reads the owner from the content of /proc/<pid>/environ
// (NUL-separated KEY=VALUE). An allocation ID that is not a UUID is
// ignored: nothing else Nomad generates looks like one.
func ParseEnviron(b []byte) Owner {
	var o Owner
	for len(b) > 0 {
		var kv []byte
		if i := bytes.IndexByte(b, 0); i >= 0 {
			kv, b = b[:i], b[i+1:]
		} else {
			kv, b = b, nil
		}
		k, v, ok := bytes.Cut(kv, []byte{'='})
		if !ok {
			continue
		}
		switch string(k) {
		case envAllocID:
			o.AllocID = string(v)
		case envTask:
			o.Task = string(v)
		case envNamespace:
			o.Namespace = string(v)
		case envJob:
			o.Job = string(v)
		}
	}
	if !IsUUID(o.AllocID) {
		return Owner{}
	}
	o.Source = "environ"
	return o
}

// ParseCgroup reads the owner from the content of /proc/<pid>/cgroup
// ("hierarchy:controllers:path" lines). Nomad names a task's cgroup
// "<alloc ID>.<task>" under cgroups v1 and "<alloc ID>.<task>.scope" under
// v2; the first line whose last path element has that form wins.
func ParseCgroup(b []byte) Owner {
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		p := parts[2]
		last := p[strings.LastIndexByte(p, '/')+1:]
		last = strings.TrimSuffix(last, ".scope")
		if len(last) < 38 || last[36] != '.' || !IsUUID(last[:36]) {
			continue
		}
		return Owner{AllocID: last[:36], Task: last[37:], Source: "cgroup"}
	}
	return Owner{}
}

// IsUUID reports whether s is a canonical lower- or upper-case UUID, the
// form of Nomad's allocation IDs.
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		default:
			return false
		}
	}
	return true
}

// ErrBadStat is returned for a /proc/<pid>/stat that does not parse.
var ErrBadStat = errors.New("malformed /proc/<pid>/stat")

// ParseStat reads the command name and the start time (field 22, in clock
// ticks since boot) from the content of /proc/<pid>/stat. The command name
// is in parentheses and may itself hold spaces and parentheses, so the
// fields are counted from the last ")".
func ParseStat(b []byte) (comm string, startTicks uint64, err error) {
	open := bytes.IndexByte(b, '(')
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return "", 0, fmt.Errorf("%w: no command name", ErrBadStat)
	}
	comm = string(b[open+1 : closing])
	// After ") " come fields 3 (state) onwards; start time is field 22.
	field := nthField(b[closing+1:], 22-3)
	if field == nil {
		return "", 0, fmt.Errorf("%w: fewer than 22 fields", ErrBadStat)
	}
	startTicks, err = strconv.ParseUint(string(field), 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("%w: start time %q", ErrBadStat, field)
	}
	return comm, startTicks, nil
}

// nthField returns the n-th (from 0) space-separated field of b, nil when
// there are fewer.
func nthField(b []byte, n int) []byte {
	for i := 0; ; i++ {
		for len(b) > 0 && (b[0] == ' ' || b[0] == '\n') {
			b = b[1:]
		}
		if len(b) == 0 {
			return nil
		}
		end := bytes.IndexAny(b, " \n")
		if end < 0 {
			end = len(b)
		}
		if i == n {
			return b[:end]
		}
		b = b[end:]
	}
}
