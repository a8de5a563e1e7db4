package soak

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
)

// startAgents builds the device plugin and starts Consul and Nomad with
// clients client nodes of gpus simulated H100s each (one idle GPU a node
// kept in the share family, the plugin's default), in dir.
func startAgents(dir string, clients, gpus int, gcThreshold time.Duration) (*localcluster.Cluster, error) {
	pluginDir := filepath.Join(dir, "plugins")
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		return nil, err
	}
	if err := localcluster.BuildBinary("github.com/gpushare/nomad-gpushare/device/cmd/nomad-device-gpushare",
		filepath.Join(pluginDir, "nomad-device-gpushare")); err != nil {
		return nil, fmt.Errorf("building the device plugin: %w", err)
	}
	configs := make([]string, clients)
	for i := range configs {
		procs := filepath.Join(dir, fmt.Sprintf("procs-%d", i))
		if err := os.MkdirAll(procs, 0o777); err != nil {
			return nil, err
		}
		os.Chmod(procs, 0o777)
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		configs[i] = fmt.Sprintf(`
plugin "nomad-device-gpushare" {
  config {
    backend               = "simulated"
    simulated_preset      = "h100"
    simulated_count       = %d
    simulated_seed        = "soak-client-%d"
    fingerprint_period    = "1s"
    nomad_poll_period     = "500ms"
    min_idle_share_gpus   = 1
    switch_settle_period  = "2s"
    usage_listen          = "127.0.0.1:%d"
    simulated_process_dir = %q
  }
}
`, gpus, i, port, procs)
	}
	agentsDir := filepath.Join(dir, "agents")
	if err := os.MkdirAll(agentsDir, 0o755); err != nil {
		return nil, err
	}
	return localcluster.New(localcluster.Options{Dir: agentsDir, PluginDir: pluginDir, Clients: clients,
		ClientPluginConfig: func(i int) string { return configs[i] }, WaitForDevices: []string{"nvidia/gpu"},
		JobGCThreshold: gcThreshold})
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// instance is one in-process quota-service instance that the soak kills
// (its context cancelled: it stops cycling and gives up the lock) and
// starts again under the same name.
type instance struct {
	name   string
	mu     sync.Mutex
	svc    *service.Service
	cancel context.CancelFunc
	done   chan struct{}
	newCfg func(name string) service.Config
}

func (i *instance) start() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.svc != nil {
		return
	}
	svc := service.New(i.newCfg(i.name))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(ctx) }()
	i.svc, i.cancel, i.done = svc, cancel, done
}

// stop cancels the instance and waits until Run returned.
func (i *instance) stop() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.svc == nil {
		return
	}
	i.cancel()
	<-i.done
	i.svc = nil
}

func (i *instance) running() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.svc != nil
}

func (i *instance) leading() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.svc != nil && i.svc.Status().Leader
}

// serviceConfig is an instance's configuration: production defaults but
// a short leader session and gang partial hold, so that the restore
// bound fits a short run; its log goes to logPath.
func serviceConfig(nomad *nomadapi.Client, consul *consulapi.Client, layout kvlayout.Layout, log hclog.Logger) func(string) service.Config {
	return func(name string) service.Config {
		return service.Config{Nomad: nomad, Consul: consul, Layout: layout, Log: log.Named(name), Instance: name,
			SessionTTL: 10 * time.Second, LockDelay: time.Millisecond, GangPartialHold: 20 * time.Second}
	}
}

// clients makes API clients of the agents' addresses: the cluster's own
// are replaced when an agent restarts, these stay.
func clients(c *localcluster.Cluster) (*nomadapi.Client, *consulapi.Client, error) {
	n, err := nomadapi.NewClient(&nomadapi.Config{Address: c.NomadAddr})
	if err != nil {
		return nil, nil, err
	}
	k, err := consulapi.NewClient(&consulapi.Config{Address: strings.TrimPrefix(c.ConsulAddr, "http://")})
	if err != nil {
		return nil, nil, err
	}
	return n, k, nil
}
