package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// extraClientPrefix starts the node name of every client-only agent.
const extraClientPrefix = "gpushare-client-"

// isExtraClient reports whether a node is one of the client-only agents.
func isExtraClient(name string) bool { return strings.HasPrefix(name, extraClientPrefix) }

// pluginDir is the agent configuration line naming the plugin directory.
func (c *Cluster) pluginDir() string {
	if c.opts.PluginDir == "" {
		return ""
	}
	return fmt.Sprintf("plugin_dir = %q", c.opts.PluginDir)
}

// pluginConfig is the plugin configuration of client i.
func (c *Cluster) pluginConfig(i int) string {
	if c.opts.ClientPluginConfig != nil {
		return c.opts.ClientPluginConfig(i)
	}
	return c.opts.PluginConfig
}

// startClients starts the client-only agents of Options.Clients, one
// after the other, each ready (with Options.WaitForDevices) before the
// next starts.
func (c *Cluster) startClients() error {
	if c.opts.Clients <= 1 {
		return nil
	}
	bin, err := AgentBinary("nomad")
	if err != nil {
		return err
	}
	for i := 1; i < c.opts.Clients; i++ {
		name := fmt.Sprintf("%s%d", extraClientPrefix, i)
		configure := func(p []int) (*agent, error) { return c.clientAgent(i, name, bin, p) }
		ready := func(a *agent) error { return c.waitClient(a, name) }
		a, _, err := startWithRetry(3, configure, ready)
		if a != nil {
			c.clients = append(c.clients, a)
		}
		if err != nil {
			return fmt.Errorf("nomad client %s: %w", name, err)
		}
	}
	return nil
}

// clientAgent writes the configuration of client-only agent i (node name
// name) for ports p and returns the agent.
func (c *Cluster) clientAgent(i int, name, bin string, p []int) (*agent, error) {
	dir := filepath.Join(c.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s data dir: %w", name, err)
	}
	cfg := c.nomadConfig(fmt.Sprintf("name = %q\n", name), filepath.Join(dir, "data"), p, "", c.nomadPorts[1], i)
	path := filepath.Join(dir, "nomad.hcl")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, fmt.Errorf("writing %s config: %w", name, err)
	}
	addr := fmt.Sprintf("http://127.0.0.1:%d", p[0])
	// The client's plugins find their node through their own agent; they
	// carry the server agent's token, if it has one.
	env := []string{"NOMAD_ADDR=" + addr}
	for _, e := range c.nomad.env {
		if strings.HasPrefix(e, "NOMAD_TOKEN=") {
			env = append(env, e)
		}
	}
	return &agent{name: name, bin: bin, args: []string{"agent", "-config", path}, env: env,
		logPath: filepath.Join(c.Dir, name+".log")}, nil
}

// waitClient waits until the client's node is ready, with
// Options.WaitForDevices, and records its ID.
func (c *Cluster) waitClient(a *agent, name string) error {
	waitDevices := !c.opts.ACL || c.pluginToken
	return waitUntil(a, c.opts.StartTimeout, func() error {
		id, err := readyNode(c.Nomad, func(n *nomadapi.NodeListStub) bool { return n.Name == name })
		if err != nil {
			return err
		}
		if len(c.opts.WaitForDevices) > 0 && waitDevices {
			if err := nodeHasDevices(c.Nomad, id, c.opts.WaitForDevices); err != nil {
				return err
			}
		}
		c.NodeIDs = append(c.NodeIDs, id)
		return nil
	})
}

// stopClients stops the client-only agents and every process below them.
func (c *Cluster) stopClients() []error {
	var errs []error
	for _, a := range c.clients {
		if a.cmd == nil {
			continue
		}
		tree := descendants(a.cmd.Process.Pid)
		a.stop(10 * time.Second)
		tree = append(tree, orphansOf(tree)...)
		if err := killTree(tree, 10*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.name, err))
		}
	}
	return errs
}

// ClientAgents is how many client-only agents run (Options.Clients less
// the server's own client); RestartClient and PauseClient number them
// from 0.
func (c *Cluster) ClientAgents() int { return len(c.clients) }

// ClientNodeName is the node name of client-only agent i.
func (c *Cluster) ClientNodeName(i int) string { return fmt.Sprintf("%s%d", extraClientPrefix, i+1) }

func (c *Cluster) clientAgentAt(i int) (*agent, error) {
	if i < 0 || i >= len(c.clients) {
		return nil, fmt.Errorf("no client-only agent %d (there are %d)", i, len(c.clients))
	}
	return c.clients[i], nil
}

// RestartClient stops client-only agent i (SIGINT: its tasks keep
// running, as a Nomad client restart leaves them) and starts it again on
// the same ports and data directory, waiting until its node is ready.
func (c *Cluster) RestartClient(i int) error {
	a, err := c.clientAgentAt(i)
	if err != nil {
		return err
	}
	if !a.exited() {
		c.detached = append(c.detached, descendants(a.cmd.Process.Pid)...)
		a.stop(20 * time.Second)
	}
	name := c.ClientNodeName(i)
	return restart(a, name, func(a *agent) error {
		return waitUntil(a, c.opts.StartTimeout, func() error {
			_, err := readyNode(c.Nomad, func(n *nomadapi.NodeListStub) bool { return n.Name == name })
			return err
		})
	})
}

// PauseClient stops (SIGSTOP) or continues (SIGCONT) client-only agent
// i's own process; its plugins and tasks run on. Paused past its
// heartbeat TTL, its node goes down.
func (c *Cluster) PauseClient(i int, stop bool) error {
	a, err := c.clientAgentAt(i)
	if err != nil {
		return err
	}
	if a.exited() {
		return fmt.Errorf("%s is not running", a.name)
	}
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	if err := a.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signalling %s: %w", a.name, err)
	}
	return nil
}
