package device

import (
	"context"
	"math"
	"time"

	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/vocab"
	dev "github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/structs"
)

// Statistics carry the names and units of HashiCorp's nvidia plugin
// (nomad-device-nvidia), so that dashboards built on it keep working, plus
// shares_held on share instances. A figure NVML does not report is "N/A",
// as there.
const (
	StatPowerUsage  = "Power usage"         // W: draw / power limit
	StatGPUUtil     = "GPU utilization"     // %
	StatMemoryUtil  = "Memory utilization"  // %: memory bandwidth
	StatEncoderUtil = "Encoder utilization" // %
	StatDecoderUtil = "Decoder utilization" // %
	StatTemperature = "Temperature"         // C
	StatMemoryState = "Memory state"        // MiB: used / total; each instance's summary
	StatBAR1State   = "BAR1 buffer state"   // MiB: used / total
	StatECCL1       = "ECC L1 errors"       // #: corrected since the driver loaded
	StatECCL2       = "ECC L2 errors"       // #
	StatECCMemory   = "ECC memory errors"   // #
	// StatSharesHeld is ours: shares of the GPU held by allocations, out
	// of vocab.UnitsPerGPU (share instances only).
	StatSharesHeld = "shares_held"
)

// notAvailable is the value of a figure NVML does not report.
const notAvailable = "N/A"

// Stats streams, every interval, the statistics of each GPU: under its
// whole group (instance = UUID) and under its share group (every share
// instance carries the GPU's statistics plus the shares held), and of each
// MIG device (its memory) under its group.
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
	b := statsBuilder{now: time.Now(), groups: map[string]*dev.DeviceGroupStats{}}
	holdings := p.holdings.current()
	for i := range hw.gpus {
		g := &hw.gpus[i]
		if g.MIG {
			b.addMIG(g, readings)
			continue
		}
		r, ok := readings[g.UUID]
		if !ok {
			continue
		}
		b.group(vocab.TypeWhole, g.Model).InstanceStats[g.UUID] = gpuStats(r, g.PowerLimitW, b.now)
		held := 0
		if u := holdings[g.UUID]; u != nil {
			held = u.ShareUnits
		}
		st := withSharesHeld(gpuStats(r, g.PowerLimitW, b.now), held)
		sg := b.group(vocab.TypeShare, shareGroupName(g.GPU))
		perGPU := int(p.sharesPerGPU.Load())
		for k := 0; k < perGPU; k++ {
			sg.InstanceStats[vocab.ShareOf(g.UUID, k, perGPU)] = st
		}
	}
	return &dev.StatsResponse{Groups: b.list}
}

// statsBuilder collects device group statistics in the order the groups
// are first met.
type statsBuilder struct {
	now    time.Time
	groups map[string]*dev.DeviceGroupStats
	list   []*dev.DeviceGroupStats
}

func (b *statsBuilder) group(typ, name string) *dev.DeviceGroupStats {
	k := typ + "/" + name
	g := b.groups[k]
	if g == nil {
		g = &dev.DeviceGroupStats{Vendor: vocab.Vendor, Type: typ, Name: name, InstanceStats: map[string]*dev.DeviceStats{}}
		b.groups[k] = g
		b.list = append(b.list, g)
	}
	return g
}

// addMIG adds the statistics of a MIG-enabled GPU's MIG devices.
func (b *statsBuilder) addMIG(g *hwGPU, readings map[string]gpu.Stats) {
	for _, m := range g.MIGDevices {
		r, ok := readings[m.UUID]
		if !ok {
			continue
		}
		mem := memoryState(r)
		b.group(vocab.TypeWhole, migGroupName(g, m)).InstanceStats[m.UUID] = &dev.DeviceStats{
			Summary:   mem,
			Stats:     &structs.StatObject{Attributes: map[string]*structs.StatValue{StatMemoryState: mem}},
			Timestamp: b.now,
		}
	}
}

// gpuStats converts a GPU's reading; powerLimitW is the denominator of
// its power usage (0: unknown).
func gpuStats(r gpu.Stats, powerLimitW int, now time.Time) *dev.DeviceStats {
	mem := memoryState(r)
	attrs := map[string]*structs.StatValue{
		StatMemoryState: mem,
		StatPowerUsage:  powerUsage(r.PowerW, powerLimitW),
		StatGPUUtil:     percent(r.GPUUtilPct, "time a kernel ran on the GPU over the last sample period"),
		StatMemoryUtil:  percent(r.MemUtilPct, "time the GPU memory was read or written over the last sample period"),
		StatEncoderUtil: percent(r.EncoderPct, "time the video encoder was busy over the last sample period"),
		StatDecoderUtil: percent(r.DecoderPct, "time the video decoder was busy over the last sample period"),
		StatTemperature: count(u32(r.TemperatureC), "C", "GPU temperature"),
		StatBAR1State:   ratio(r.BAR1UsedMiB, r.BAR1TotalMiB, structs.UnitMiB, "BAR1 memory used / total"),
		StatECCL1:       count(r.ECCCorrected.L1Cache, "#", "corrected L1 cache ECC errors since the driver loaded"),
		StatECCL2:       count(r.ECCCorrected.L2Cache, "#", "corrected L2 cache ECC errors since the driver loaded"),
		StatECCMemory:   count(r.ECCCorrected.Device, "#", "corrected device memory ECC errors since the driver loaded"),
	}
	return &dev.DeviceStats{Summary: mem, Stats: &structs.StatObject{Attributes: attrs}, Timestamp: now}
}

// withSharesHeld adds the shares held to a share instance's statistics.
func withSharesHeld(st *dev.DeviceStats, held int) *dev.DeviceStats {
	h, total := uint64(held), uint64(vocab.UnitsPerGPU)
	st.Stats.Attributes[StatSharesHeld] = ratio(&h, &total, "", "shares held by allocations")
	return st
}

func memoryState(r gpu.Stats) *structs.StatValue {
	if r.Err != nil {
		return na(structs.UnitMiB, "GPU memory used / total")
	}
	return ratio(&r.MemUsedMiB, &r.MemTotalMiB, structs.UnitMiB, "GPU memory used / total")
}

func powerUsage(w *float64, limitW int) *structs.StatValue {
	const desc = "power draw / power limit"
	if w == nil {
		return na(structs.UnitW, desc)
	}
	v := &structs.StatValue{Unit: structs.UnitW, Desc: desc, IntNumeratorVal: i64(uint64(math.Round(*w)))}
	if limitW > 0 {
		v.IntDenominatorVal = i64(uint64(limitW))
	}
	return v
}

func percent(v *uint32, desc string) *structs.StatValue { return count(u32(v), "%", desc) }

func count(v *uint64, unit, desc string) *structs.StatValue {
	if v == nil {
		return na(unit, desc)
	}
	return &structs.StatValue{Unit: unit, Desc: desc, IntNumeratorVal: i64(*v)}
}

func ratio(num, den *uint64, unit, desc string) *structs.StatValue {
	if num == nil || den == nil {
		return na(unit, desc)
	}
	return &structs.StatValue{Unit: unit, Desc: desc, IntNumeratorVal: i64(*num), IntDenominatorVal: i64(*den)}
}

func na(unit, desc string) *structs.StatValue {
	s := notAvailable
	return &structs.StatValue{Unit: unit, Desc: desc, StringVal: &s}
}

func u32(v *uint32) *uint64 {
	if v == nil {
		return nil
	}
	x := uint64(*v)
	return &x
}

func i64(v uint64) *int64 { x := int64(v); return &x }
