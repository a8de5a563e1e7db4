// Package simproc is the file format through which simulated GPU processes
// (device/cmd/gpushare-simload, run as ordinary tasks) tell the simulated
// NVML backend (package gpu) what they "use": each live process keeps one
// JSON file <dir>/<pid>.json naming its GPU, its memory and its SM
// utilization. The backend reports every live one as an NVML compute
// process with its real host PID, so that the plugin's accounting, kills
// and moves act on real processes. A file whose process is gone (a killed
// process leaves it behind) is ignored and removed.
package simproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpushare/nomad-gpushare/device/tenants"
)

// State is what one simulated process uses.
type State struct {
	PID int `json:"pid"`
	// StartTicks is the process's start time (/proc/<pid>/stat), so that a
	// recycled PID is not taken for it.
	StartTicks uint64 `json:"start_ticks"`
	// GPU is the UUID of the GPU it runs on (its NVIDIA_VISIBLE_DEVICES).
	GPU     string `json:"gpu"`
	UsedMiB uint64 `json:"used_mib"`
	SMPct   uint32 `json:"sm_pct"`
}

const suffix = ".json"

// Write replaces the process's file atomically (write, then rename).
func Write(dir string, s State) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%d.tmp", s.PID))
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("simulated process state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, strconv.Itoa(s.PID)+suffix)); err != nil {
		return fmt.Errorf("simulated process state: %w", err)
	}
	return nil
}

// Remove deletes the process's file.
func Remove(dir string, pid int) {
	_ = os.Remove(filepath.Join(dir, strconv.Itoa(pid)+suffix))
}

// List returns the states of the live processes in dir. The files of
// processes that are gone are removed; unreadable files are skipped. A
// missing directory lists nothing.
func List(dir string) ([]State, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("simulated processes: %w", err)
	}
	var out []State
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, suffix) || strings.HasPrefix(name, ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		var s State
		if json.Unmarshal(b, &s) != nil || s.PID <= 0 {
			continue
		}
		if !Alive(s.PID, s.StartTicks) {
			Remove(dir, s.PID)
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

// Alive reports whether pid still names the process that started at
// startTicks and has not exited (a zombie holds no GPU memory).
func Alive(pid int, startTicks uint64) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	_, start, err := tenants.ParseStat(b)
	if err != nil || start != startTicks {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	state := strings.TrimSpace(string(b[i+1:]))
	return state != "" && state[0] != 'Z' && state[0] != 'X'
}

// StartTicks is the start time of pid (0 for the calling process).
func StartTicks(pid int) (uint64, error) {
	name := "self"
	if pid != 0 {
		name = strconv.Itoa(pid)
	}
	b, err := os.ReadFile(filepath.Join("/proc", name, "stat"))
	if err != nil {
		return 0, err
	}
	_, start, err := tenants.ParseStat(b)
	return start, err
}
