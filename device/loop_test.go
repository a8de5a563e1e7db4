package device

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpushare/nomad-gpushare/device/gpu"
	hclog "github.com/hashicorp/go-hclog"
)

// gatedNVML is a simulated machine whose first DeviceGetCount call blocks
// until gate is closed (an NVML call that hangs); it notes every call and
// whether two ever ran at once.
type gatedNVML struct {
	*gpu.Simulated
	gate    chan struct{}
	entered chan struct{}
	calls   atomic.Int32
	inside  atomic.Int32
	overlap atomic.Bool
}

func (g *gatedNVML) DeviceGetCount() (int, nvml.Return) {
	if g.inside.Add(1) > 1 {
		g.overlap.Store(true)
	}
	defer g.inside.Add(-1)
	first := g.calls.Add(1) == 1
	select {
	case g.entered <- struct{}{}:
	default:
	}
	if first {
		<-g.gate
	}
	return g.Simulated.DeviceGetCount()
}

// signalWriter is a log sink that closes seen when a line contains want.
type signalWriter struct {
	want string
	once sync.Once
	seen chan struct{}
}

func (w *signalWriter) Write(b []byte) (int, error) {
	if strings.Contains(string(b), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(b), nil
}

// TestReconfigureWaitsForTheRunningLoop: SetConfig while the loop is stuck
// in an NVML call does not start a second loop; it waits for the first to
// exit, and the streams then follow the new loop.
func TestReconfigureWaitsForTheRunningLoop(t *testing.T) {
	f := newFakeNomad(t)
	sim, err := gpu.NewSimulated(gpu.SimOptions{Preset: gpu.PresetA100, Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	lib := &gatedNVML{Simulated: sim, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	release := sync.OnceFunc(func() { close(lib.gate) })
	waiting := &signalWriter{want: "waiting for the running loop to stop", seen: make(chan struct{})}
	p := New(hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: waiting}))
	p.newLib = func() nvml.Interface { return lib }
	c := DefaultConfig()
	c.NomadAddress, c.NodeID, c.FingerprintPeriod, c.NomadPollPeriod, c.SwitchSettlePeriod = f.URL, fakeNodeID, "100ms", "100ms", "0s"
	if err := p.configure(c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Shutdown)
	t.Cleanup(release)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := p.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-lib.entered // the loop is inside NVML, which hangs

	reconfigured := make(chan error, 1)
	go func() { reconfigured <- p.configure(c) }()
	select {
	case err := <-reconfigured:
		t.Fatalf("reconfigured (%v) while the running loop was still inside NVML", err)
	case <-waiting.seen:
	case <-time.After(30 * time.Second):
		t.Fatal("SetConfig neither waited for the running loop nor returned")
	}
	release()
	select {
	case err := <-reconfigured:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("SetConfig did not return once the running loop could exit")
	}

	// The stream follows the new loop: both GPUs are published (one whole,
	// one share landing place).
	deadline := time.After(10 * time.Second)
	for healthy := 0; healthy != 1+100; {
		select {
		case r := <-ch:
			healthy = 0
			for _, g := range r.Devices {
				for _, d := range g.Devices {
					if d.Healthy {
						healthy++
					}
				}
			}
		case <-deadline:
			t.Fatal("GPUs never published by the new loop")
		}
	}
	if lib.overlap.Load() {
		t.Error("two loops read NVML at once")
	}
}
