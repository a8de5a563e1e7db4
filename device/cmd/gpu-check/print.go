package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/device"
	"github.com/gpushare/nomad-gpushare/vocab"
	dev "github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/structs"
)

// printGroups prints the device groups: attributes, then instances (a
// share group's instances share one health, so the first stands for all).
func printGroups(groups []*dev.DeviceGroup) {
	fmt.Println("== fingerprint")
	for _, g := range groups {
		fmt.Printf("%s/%s/%s\n", g.Vendor, g.Type, g.Name)
		for _, k := range slices.Sorted(maps.Keys(g.Attributes)) {
			fmt.Printf("  attr %-20s %s\n", k, g.Attributes[k].GoString())
		}
		for i, d := range g.Devices {
			if g.Type == vocab.TypeShare && i > 0 {
				fmt.Printf("  ... %d share instances in all\n", len(g.Devices))
				break
			}
			health := "healthy"
			if !d.Healthy {
				health = "unhealthy: " + d.HealthDesc
			}
			fmt.Printf("  device %s  %s\n", d.ID, health)
		}
	}
}

// stats prints the first statistics of every group (one instance of a
// share group).
func stats(ctx context.Context, p *device.Plugin) error {
	ch, err := p.Stats(ctx, time.Second)
	if err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	var r *dev.StatsResponse
	select {
	case r = <-ch:
	case <-ctx.Done():
		return errors.New("stats: no answer in time")
	}
	if r == nil || r.Error != nil {
		return fmt.Errorf("stats: %v", r.Error)
	}
	fmt.Println("== stats")
	for _, g := range r.Groups {
		fmt.Printf("%s/%s/%s\n", g.Vendor, g.Type, g.Name)
		for i, id := range slices.Sorted(maps.Keys(g.InstanceStats)) {
			if g.Type == vocab.TypeShare && i > 0 {
				break
			}
			fmt.Printf("  %s\n", id)
			st := g.InstanceStats[id].Stats.Attributes
			for _, k := range slices.Sorted(maps.Keys(st)) {
				fmt.Printf("    %-22s %s\n", k, statString(st[k]))
			}
		}
	}
	return nil
}

// reserve reserves the given number of share instances of the first GPU
// offered as shares, else the first whole GPU or MIG device offered, prints
// what the task would get and returns its environment.
func reserve(p *device.Plugin, groups []*dev.DeviceGroup, shares int) (map[string]string, error) {
	var ids []string
	for _, g := range groups {
		if len(ids) > 0 {
			break
		}
		for _, d := range g.Devices {
			if d.Healthy && g.Type == "gpu-share" && len(ids) < shares {
				ids = append(ids, d.ID)
			}
		}
	}
	for _, g := range groups {
		for _, d := range g.Devices {
			if len(ids) == 0 && d.Healthy && g.Type == "gpu" {
				ids = append(ids, d.ID)
			}
		}
	}
	if len(ids) == 0 {
		return nil, errors.New("reserve: no healthy device to reserve")
	}
	r, err := p.Reserve(ids)
	if err != nil {
		return nil, fmt.Errorf("reserve %s..: %w", ids[0], err)
	}
	fmt.Printf("== reserve %s (%d instances)\n", ids[0], len(ids))
	for _, k := range slices.Sorted(maps.Keys(r.Envs)) {
		fmt.Printf("  env   %s=%s\n", k, r.Envs[k])
	}
	for _, m := range r.Mounts {
		fmt.Printf("  mount %s -> %s\n", m.HostPath, m.TaskPath)
	}
	for _, d := range r.Devices {
		fmt.Printf("  device %s -> %s\n", d.HostPath, d.TaskPath)
	}
	return r.Envs, nil
}

func statString(v *structs.StatValue) string {
	switch {
	case v == nil:
		return ""
	case v.StringVal != nil:
		return *v.StringVal + " " + v.Unit
	case v.IntNumeratorVal != nil && v.IntDenominatorVal != nil:
		return fmt.Sprintf("%d / %d %s", *v.IntNumeratorVal, *v.IntDenominatorVal, v.Unit)
	case v.IntNumeratorVal != nil:
		return fmt.Sprintf("%d %s", *v.IntNumeratorVal, v.Unit)
	case v.FloatNumeratorVal != nil:
		return fmt.Sprintf("%.1f %s", *v.FloatNumeratorVal, v.Unit)
	}
	return strings.TrimSpace(v.Desc)
}
