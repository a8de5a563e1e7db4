package device_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
)

// TestCoarseSharesOnRealNomad: with shares_per_gpu = 4 a real Nomad
// places a request for 2 share instances on one GPU, the task gets half of
// it, and the node's stats count 50 shares held.
func TestCoarseSharesOnRealNomad(t *testing.T) {
	cfg := strings.Replace(pluginConfig, "min_idle_share_gpus  = 1", "min_idle_share_gpus  = 1\n    shares_per_gpu       = 4", 1)
	c, _ := startClusterWith(t, cfg)
	defer func() {
		if t.Failed() {
			t.Logf("nomad log tail:\n%s", c.NomadLogTail(60))
		}
	}()
	landing := waitLayout(t, c, 3, 1)

	gpuJob(t, c, "half", "gpu-share", 2)
	env, alloc := runningEnv(t, c, "half")
	if env["GPUSHARE_FRACTION"] != "0.5" || env["GPUSHARE_MEMORY_LIMIT_MIB"] != "40960" {
		t.Errorf("GPUSHARE_FRACTION = %q, GPUSHARE_MEMORY_LIMIT_MIB = %q; want 0.5 and 40960", env["GPUSHARE_FRACTION"], env["GPUSHARE_MEMORY_LIMIT_MIB"])
	}
	dev := alloc.AllocatedResources.Tasks["main"].Devices[0]
	if dev.Name != landing[0] || len(dev.DeviceIDs) != 2 || !strings.HasPrefix(dev.DeviceIDs[0], env["NVIDIA_VISIBLE_DEVICES"]+"-u25-s") {
		t.Errorf("instances %v of group %s, env GPU %s; want two %s-u25-sNN of %s", dev.DeviceIDs, dev.Name, env["NVIDIA_VISIBLE_DEVICES"], env["NVIDIA_VISIBLE_DEVICES"], landing[0])
	}
	testcluster.Eventually(t, liveWindow, func() error {
		hs, err := c.Nomad.Nodes().Stats(c.NodeID, nil)
		if err != nil {
			return err
		}
		for _, g := range hs.DeviceStats {
			if g.Type != "gpu-share" || g.Name != landing[0] {
				continue
			}
			if len(g.InstanceStats) != 4 {
				return fmt.Errorf("share group %s reports %d instances, want 4", g.Name, len(g.InstanceStats))
			}
			st := g.InstanceStats[dev.DeviceIDs[0]]
			if st == nil || st.Stats == nil || st.Stats.Attributes["shares_held"] == nil {
				return fmt.Errorf("share stats %+v", st)
			}
			if held := *st.Stats.Attributes["shares_held"].IntNumeratorVal; held != 50 {
				return fmt.Errorf("shares_held = %d, want 50", held)
			}
			return nil
		}
		return fmt.Errorf("no stats for share group %s", landing[0])
	})
}
