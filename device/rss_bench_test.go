package device

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/nomad/plugins/base"
	dev "github.com/hashicorp/nomad/plugins/device"
)

// procStatus reads one size field ("VmRSS", "RssAnon", "RssFile") of a
// process, in bytes, from /proc.
func procStatus(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the plugin's status: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parsing %s %q: %w", field, v, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// BenchmarkPluginRSS starts the built plugin binary through go-plugin, as
// the Nomad client does, on a simulated 8 x H100 machine whose Nomad API is
// the fake one, waits for all GPUs to be published, then reads b.N stats
// responses (8 GPUs, 8 share groups) and reports the process's VmRSS
// (target: 40 MiB or less), with its anonymous and file-backed parts.
func BenchmarkPluginRSS(b *testing.B) {
	bin := filepath.Join(b.TempDir(), PluginName)
	if err := localcluster.BuildBinary("github.com/gpushare/nomad-gpushare/device/cmd/nomad-device-gpushare", bin); err != nil {
		b.Fatal(err)
	}
	f := newFakeNomad(b)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  base.Handshake,
		Plugins:          map[string]plugin.Plugin{base.PluginTypeBase: &base.PluginBase{}, base.PluginTypeDevice: &dev.PluginDevice{}},
		Cmd:              exec.Command(bin),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.NewNullLogger(),
	})
	defer client.Kill()
	rpc, err := client.Client()
	if err != nil {
		b.Fatalf("starting the plugin: %v", err)
	}
	raw, err := rpc.Dispense(base.PluginTypeDevice)
	if err != nil {
		b.Fatalf("dispensing the device plugin: %v", err)
	}
	p := raw.(dev.DevicePlugin)
	var cfg []byte
	err = base.MsgPackEncode(&cfg, map[string]any{
		"backend": BackendSimulated, "simulated_preset": "h100", "simulated_count": 8,
		"fingerprint_period": "1s", "nomad_poll_period": "200ms", "switch_settle_period": "0s",
		"min_idle_share_gpus": 4, "share_headroom": 50,
		"nomad_address": f.URL, "node_id": fakeNodeID, "mps_pipe_directory": "/tmp/nvidia-mps",
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := p.SetConfig(&base.Config{PluginConfig: cfg, ApiVersion: dev.ApiVersion010}); err != nil {
		b.Fatalf("SetConfig: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fps, err := p.Fingerprint(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// Act as the Nomad client: push each fingerprint to the servers' view
	// until 4 whole GPUs and 4 share groups are allocatable.
	for published := false; !published; {
		var resp *dev.FingerprintResponse
		select {
		case resp = <-fps:
		case <-ctx.Done():
			b.Fatal("GPUs not published within 60s")
		}
		if resp == nil || resp.Error != nil {
			b.Fatalf("fingerprint: %+v", resp)
		}
		f.sync(resp.Devices)
		healthy := 0
		for _, g := range resp.Devices {
			for _, d := range g.Devices {
				if d.Healthy {
					healthy++
				}
			}
		}
		published = healthy == 4+4*100
	}
	stats, err := p.Stats(ctx, 10*time.Millisecond)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if s := <-stats; s == nil || s.Error != nil || len(s.Groups) != 9 {
			b.Fatalf("stats: %+v", s)
		}
	}
	b.StopTimer()
	// VmRSS is the figure; its anonymous (heap, stacks) and file-backed
	// (binary text) parts show where it goes.
	for _, m := range []struct{ field, unit string }{{"VmRSS", "RSS-MiB"}, {"RssAnon", "anon-MiB"}, {"RssFile", "file-MiB"}} {
		v, err := procStatus(client.ReattachConfig().Pid, m.field)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(v)/(1<<20), m.unit)
	}
}
