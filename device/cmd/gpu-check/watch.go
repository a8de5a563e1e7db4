package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpushare/nomad-gpushare/device"
	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/device/tenants"
)

// writeEnv writes a reservation's environment as sorted KEY=VALUE lines,
// the format of a shell's `env` and of systemd's EnvironmentFile.
func writeEnv(path string, envs map[string]string) error {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(envs)) {
		fmt.Fprintf(&b, "%s=%s\n", k, envs[k])
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("-env-file: %w", err)
	}
	return nil
}

// watchProcesses prints, once a second for the given time, every GPU's
// compute processes as the plugin reads them from NVML, each with the Nomad
// allocation it belongs to as the plugin resolves it from /proc (none for a
// process outside Nomad). Only the nvml backend has real processes to show.
func watchProcesses(backend string, d time.Duration) error {
	if backend != device.BackendNVML {
		return fmt.Errorf("-watch lists NVML's processes: use -backend %s", device.BackendNVML)
	}
	src := gpu.NewSource(nvml.New())
	defer src.Close()
	owners := tenants.NewResolver("/proc")
	lastSample := map[string]uint64{}
	fmt.Println("== processes (PID, GPU memory, SM utilization)")
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		procs, errs, err := src.Processes(lastSample)
		if err != nil {
			return fmt.Errorf("processes: %w", err)
		}
		printProcesses(procs, errs, owners)
	}
	return nil
}

// printProcesses prints one reading of every GPU's processes.
func printProcesses(procs map[string][]gpu.Process, errs map[string]error, owners *tenants.Resolver) {
	fmt.Printf("-- %s\n", time.Now().Format(time.TimeOnly))
	for _, uuid := range slices.Sorted(maps.Keys(errs)) {
		fmt.Printf("  %s  error: %v\n", uuid, errs[uuid])
	}
	for _, uuid := range slices.Sorted(maps.Keys(procs)) {
		for _, p := range procs[uuid] {
			mem := "unknown"
			if p.MemKnown {
				mem = fmt.Sprintf("%d MiB", p.UsedMiB)
			}
			fmt.Printf("  %s  pid %d  %s  sm %d%%  %s\n", uuid, p.PID, mem, p.SMPct, ownerString(owners, p.PID))
		}
	}
}

// ownerString names the allocation and task a process belongs to.
func ownerString(owners *tenants.Resolver, pid int) string {
	id, err := owners.Resolve(pid)
	switch {
	case err != nil:
		return fmt.Sprintf("owner unknown (%v)", err)
	case !id.Owner.Known():
		return id.Comm + ", no allocation"
	default:
		return fmt.Sprintf("%s, alloc %s task %s", id.Comm, id.Owner.AllocID, id.Owner.Task)
	}
}
