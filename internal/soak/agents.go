package soak

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
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
	if err := localcluster.BuildBinary("github.com/gpushare/nomad-gpushare/quota-service/cmd/gpushare-quota",
		filepath.Join(dir, "gpushare-quota")); err != nil {
		return nil, fmt.Errorf("building the quota service: %w", err)
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

// instance is one quota-service process (the gpushare-quota binary, as
// production runs it): the soak kills it (SIGKILL: a crash, its leader
// session left to expire), pauses it (SIGSTOP, SIGCONT) and starts it
// again under the same name and port. An exit the soak did not cause is
// a crash: onCrash hears of it with the log's last lines, and the
// instance is started again, as Nomad would.
type instance struct {
	name, bin, logPath string
	args               []string
	port               int
	onCrash            func(name, why string)

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	killing bool
	paused  bool
}

func (i *instance) start() error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(i.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(i.bin, append([]string{"-instance", i.name, "-listen", fmt.Sprintf("127.0.0.1:%d", i.port)}, i.args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s: %w", i.name, err)
	}
	exited := make(chan struct{})
	i.cmd, i.exited, i.killing, i.paused = cmd, exited, false, false
	go func() {
		err := cmd.Wait()
		logf.Close()
		close(exited)
		i.mu.Lock()
		crashed := !i.killing && i.cmd == cmd
		if i.cmd == cmd {
			i.cmd = nil
		}
		i.mu.Unlock()
		if crashed {
			i.onCrash(i.name, fmt.Sprintf("%v; last lines of its log:\n%s", err, tail(i.logPath, 40)))
			i.start()
		}
	}()
	return nil
}

// kill sends SIGKILL (continuing a paused process first) and waits
// until it exited.
func (i *instance) kill() {
	i.mu.Lock()
	cmd, exited := i.cmd, i.exited
	if cmd == nil {
		i.mu.Unlock()
		return
	}
	i.killing = true
	i.mu.Unlock()
	cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// pause stops (SIGSTOP) or continues (SIGCONT) the process.
func (i *instance) pause(stop bool) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.cmd == nil {
		return fmt.Errorf("%s is not running", i.name)
	}
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	i.paused = stop
	return i.cmd.Process.Signal(sig)
}

// pid is the process's ID, 0 when it does not run.
func (i *instance) pid() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.cmd == nil {
		return 0
	}
	return i.cmd.Process.Pid
}

func (i *instance) running() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.cmd != nil && !i.paused
}

// leading asks the instance's health endpoint whether it leads.
func (i *instance) leading() bool {
	if !i.running() {
		return false
	}
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/health", i.port))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct {
		Leader bool `json:"leader"`
	}
	return json.NewDecoder(resp.Body).Decode(&h) == nil && h.Leader
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// serviceArgs are the instances' flags: production defaults but a gang
// partial hold of 20 s, so that the restore bound fits a short run, and
// Nomad at nomadAddr (the instance's proxy), logging at logLevel (empty:
// info).
func serviceArgs(c *localcluster.Cluster, nomadAddr, root, logLevel string) []string {
	if logLevel == "" {
		logLevel = "info"
	}
	return []string{"-nomad-addr", nomadAddr, "-consul-addr", strings.TrimPrefix(c.ConsulAddr, "http://"),
		"-kv-prefix", root, "-gang-partial-hold", "20s", "-log-level", logLevel}
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
