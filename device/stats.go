package device

import (
	"context"
	"time"

	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/device/ids"
	dev "github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/structs"
)

// Stats streams, every interval, the statistics of each GPU: under its
// whole group (instance = UUID) and under its share group (every share
// instance carries the GPU's statistics plus the shares held).
func (p *Plugin) Stats(ctx context.Context, interval time.Duration) (<-chan *dev.StatsResponse, error) {
	if err := p.start(); err != nil {
		return nil, err
	}
	if interval <= 0 {
		interval = time.Second
	}
	out := make(chan *dev.StatsResponse)
	go func() {
		defer close(out)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.ctx.Done():
				return
			case <-t.C:
				t.Reset(interval)
			}
			resp := p.collectStats()
			select {
			case out <- resp:
			case <-ctx.Done():
				return
			case <-p.ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// collectStats reads the GPUs' statistics once.
func (p *Plugin) collectStats() *dev.StatsResponse {
	readings, hw, err := p.hw.stats()
	if err != nil {
		// Reported on the stream: Nomad's client logs it and retries.
		return dev.NewStatsError(err)
	}
	use := p.usage.current()
	now := time.Now()
	var groups []*dev.DeviceGroupStats
	whole := map[string]*dev.DeviceGroupStats{}
	for _, g := range hw.gpus {
		r, ok := readings[g.UUID]
		if !ok || g.MIG {
			continue
		}
		wg := whole[g.Model]
		if wg == nil {
			wg = &dev.DeviceGroupStats{Vendor: ids.Vendor, Type: ids.TypeWhole, Name: g.Model, InstanceStats: map[string]*dev.DeviceStats{}}
			whole[g.Model] = wg
			groups = append(groups, wg)
		}
		wg.InstanceStats[g.UUID] = gpuStats(r, now, -1)
		held := 0
		if u := use[g.UUID]; u != nil {
			held = u.ShareUnits
		}
		sg := &dev.DeviceGroupStats{Vendor: ids.Vendor, Type: ids.TypeShare, Name: shareGroupName(g.GPU),
			InstanceStats: make(map[string]*dev.DeviceStats, ids.SharesPerGPU)}
		st := gpuStats(r, now, held)
		for k := 0; k < ids.SharesPerGPU; k++ {
			sg.InstanceStats[ids.Share(g.UUID, k)] = st
		}
		groups = append(groups, sg)
	}
	return &dev.StatsResponse{Groups: groups}
}

func i64(v uint64) *int64 { x := int64(v); return &x }

// gpuStats converts a reading; sharesHeld < 0 leaves the share figures out.
func gpuStats(r gpu.Stats, now time.Time, sharesHeld int) *dev.DeviceStats {
	attrs := map[string]*structs.StatValue{
		"memory_used": {IntNumeratorVal: i64(r.MemUsedMiB), IntDenominatorVal: i64(r.MemTotalMiB), Unit: structs.UnitMiB, Desc: "GPU memory used"},
	}
	if r.GPUUtilPct != nil {
		attrs["gpu_utilization"] = &structs.StatValue{IntNumeratorVal: i64(uint64(*r.GPUUtilPct)), Unit: "%", Desc: "GPU utilization"}
		attrs["memory_utilization"] = &structs.StatValue{IntNumeratorVal: i64(uint64(*r.MemUtilPct)), Unit: "%", Desc: "memory bandwidth utilization"}
	}
	if r.TemperatureC != nil {
		attrs["temperature"] = &structs.StatValue{IntNumeratorVal: i64(uint64(*r.TemperatureC)), Unit: "C", Desc: "GPU temperature"}
	}
	if r.PowerW != nil {
		w := *r.PowerW
		attrs["power"] = &structs.StatValue{FloatNumeratorVal: &w, Unit: structs.UnitW, Desc: "power draw"}
	}
	if sharesHeld >= 0 {
		attrs["shares_held"] = &structs.StatValue{IntNumeratorVal: i64(uint64(sharesHeld)), IntDenominatorVal: i64(ids.SharesPerGPU), Desc: "shares held by allocations"}
	}
	return &dev.DeviceStats{
		Summary:   attrs["memory_used"],
		Stats:     &structs.StatObject{Attributes: attrs},
		Timestamp: now,
	}
}
