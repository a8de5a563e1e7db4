package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// Options says what the cluster's Nomad client carries.
type Options struct {
	// PluginDir is the Nomad plugin directory (device plugin binaries).
	// Empty: none.
	PluginDir string
	// PluginConfig is HCL appended to the Nomad agent configuration,
	// typically `plugin "name" { config { ... } }` blocks.
	PluginConfig string
	// WaitForDevices lists device IDs ("vendor/type" or
	// "vendor/type/name") that must be fingerprinted on the node, with at
	// least one healthy instance, before the cluster counts as ready.
	WaitForDevices []string
	// Dir is the directory for data and logs. Empty: a new temporary
	// directory, removed by Close.
	Dir string
	// StartTimeout bounds each agent's start. Zero: 90 s.
	StartTimeout time.Duration
	// ACL turns ACLs on in both agents, with default deny. The
	// cluster's clients then carry management tokens (ConsulToken,
	// NomadToken); the Consul agent and Nomad's Consul integration get
	// tokens of their own.
	ACL bool
	// PluginPolicy, with ACL, is the Nomad ACL policy (rules in HCL) of
	// the device plugin's token. Once Nomad is bootstrapped the cluster
	// creates the policy and a token and restarts the Nomad agent with
	// the token in NOMAD_TOKEN (UsePluginToken), as a client host's
	// service environment would. Empty: the plugin runs without a token
	// until UsePluginToken, and New does not wait for WaitForDevices.
	PluginPolicy string
	// JobGCThreshold, when set, is the Nomad server's job_gc_threshold
	// and job_gc_interval: stopped jobs are collected that long after
	// their last change, checked as often. Zero: Nomad's defaults (4 h,
	// every 5 min).
	JobGCThreshold time.Duration
	// ConsulOnly starts the Consul agent alone (no Nomad): for programs
	// that bring their own Nomad, such as the scale benchmark's stand-in.
	ConsulOnly bool
	// Clients, when above 1, is the number of Nomad client nodes: the
	// agent that is server and client, and Clients-1 client-only agents
	// on the same machine (clients.go), each with its own data directory,
	// ports, node name and plugin processes. Zero or 1: the one agent.
	Clients int
	// ClientPluginConfig, when set, is the plugin configuration of client
	// i (0 is the server's own client) in place of PluginConfig: each
	// client's device plugin needs its own simulated GPUs, usage port and
	// process directory.
	ClientPluginConfig func(i int) string
}

// Cluster is a running Consul agent and a Nomad server+client.
type Cluster struct {
	// Dir holds both agents' data, configuration and logs (consul.log,
	// nomad.log).
	Dir string
	// ConsulAddr and NomadAddr are the agents' HTTP addresses
	// (http://127.0.0.1:port).
	ConsulAddr string
	NomadAddr  string
	Consul     *consulapi.Client
	Nomad      *nomadapi.Client
	// NodeID is the Nomad client node's ID (the server's own client).
	NodeID string
	// NodeIDs are the IDs of every client node, in Options.Clients order:
	// NodeIDs[0] is NodeID.
	NodeIDs []string
	// ConsulToken and NomadToken are the management tokens with
	// Options.ACL, empty without.
	ConsulToken string
	NomadToken  string

	opts        Options
	acl         aclSecrets
	pluginToken bool
	ownDir      bool
	consul      *agent
	nomad       *agent
	nomadPorts  []int
	// clients are the client-only agents (Options.Clients).
	clients []*agent
	// detached holds processes that a stopped Nomad agent left running
	// (executors and tasks survive a client restart); Close kills them.
	detached []int
}

// New starts a cluster. The caller must Close it.
func New(opts Options) (*Cluster, error) {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 90 * time.Second
	}
	c := &Cluster{opts: opts, Dir: opts.Dir}
	if c.Dir == "" {
		dir, err := os.MkdirTemp("", "gpushare-cluster-")
		if err != nil {
			return nil, fmt.Errorf("creating cluster directory: %w", err)
		}
		c.Dir, c.ownDir = dir, true
	}
	if opts.ACL {
		secrets, err := newACLSecrets()
		if err != nil {
			return nil, err
		}
		c.acl, c.ConsulToken, c.NomadToken = secrets, secrets.consulManagement, secrets.nomadManagement
	}
	if err := c.start(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// start starts Consul, then Nomad; with ACLs, it makes the agents' tokens
// and the plugin's.
func (c *Cluster) start() error {
	if err := c.startConsul(); err != nil {
		return err
	}
	if c.opts.ACL {
		if err := consulAgentTokens(c.Consul, c.acl); err != nil {
			return err
		}
	}
	if c.opts.ConsulOnly {
		return nil
	}
	if err := c.startNomad(); err != nil {
		return err
	}
	if c.opts.ACL && c.opts.PluginPolicy != "" {
		if err := c.restartWithPluginToken(); err != nil {
			return err
		}
	}
	return c.startClients()
}

// restartWithPluginToken creates the plugin's Nomad token and restarts the
// Nomad agent with it.
func (c *Cluster) restartWithPluginToken() error {
	secret, err := c.CreateNomadToken("gpushare-plugin", c.opts.PluginPolicy)
	if err != nil {
		return err
	}
	return c.UsePluginToken(secret)
}

// UsePluginToken restarts the Nomad agent with NOMAD_TOKEN=secret in its
// environment, which device plugins inherit (Nomad keeps it from tasks),
// and waits until the node is ready with Options.WaitForDevices. Running
// tasks survive.
func (c *Cluster) UsePluginToken(secret string) error {
	env := []string{"NOMAD_TOKEN=" + secret}
	for _, e := range c.nomad.env {
		if !strings.HasPrefix(e, "NOMAD_TOKEN=") {
			env = append(env, e)
		}
	}
	c.nomad.env = env
	c.pluginToken = true
	return c.RestartNomad()
}

// startWithRetry starts an agent on fresh ports until it does not die of a
// busy port, at most three times. configure writes the agent's config for
// the given ports and returns the agent.
func startWithRetry(nports int, configure func(ports []int) (*agent, error), ready func(a *agent) error) (*agent, []int, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ports, err := freePorts(nports)
		if err != nil {
			return nil, nil, err
		}
		a, err := configure(ports)
		if err != nil {
			return nil, nil, err
		}
		if err := a.start(); err != nil {
			return nil, nil, err
		}
		err = ready(a)
		if err == nil {
			return a, ports, nil
		}
		a.stop(5 * time.Second)
		lastErr = a.failure(err)
		if !a.portBusy() {
			return nil, nil, lastErr
		}
	}
	return nil, nil, fmt.Errorf("ports stayed busy after 3 attempts: %w", lastErr)
}

func (c *Cluster) startConsul() error {
	bin, err := AgentBinary("consul")
	if err != nil {
		return err
	}
	dir := filepath.Join(c.Dir, "consul")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating consul data dir: %w", err)
	}
	configure := func(p []int) (*agent, error) {
		cfg := fmt.Sprintf(`
node_name = "gpushare-test"
datacenter = "dc1"
data_dir = %q
server = true
bootstrap_expect = 1
bind_addr = "127.0.0.1"
client_addr = "127.0.0.1"
advertise_addr = "127.0.0.1"
log_level = "INFO"
enable_script_checks = false
ui_config { enabled = true }
performance { raft_multiplier = 1 }
ports {
  http = %d
  server = %d
  serf_lan = %d
  serf_wan = %d
  dns = -1
  grpc = -1
  grpc_tls = -1
}
%s
`, filepath.Join(dir, "data"), p[0], p[1], p[2], p[3], c.consulACLConfig())
		path := filepath.Join(dir, "consul.hcl")
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			return nil, fmt.Errorf("writing consul config: %w", err)
		}
		c.ConsulAddr = fmt.Sprintf("http://127.0.0.1:%d", p[0])
		return &agent{name: "consul", bin: bin, args: []string{"agent", "-config-file", path},
			logPath: filepath.Join(c.Dir, "consul.log")}, nil
	}
	a, _, err := startWithRetry(4, configure, c.waitConsul)
	if err != nil {
		return err
	}
	c.consul = a
	return nil
}

func (c *Cluster) waitConsul(a *agent) error {
	client, err := consulapi.NewClient(&consulapi.Config{Address: strings.TrimPrefix(c.ConsulAddr, "http://"), Token: c.ConsulToken})
	if err != nil {
		return fmt.Errorf("creating consul client: %w", err)
	}
	c.Consul = client
	return waitUntil(a, c.opts.StartTimeout, func() error {
		if err := hasLeader(client.Status().Leader()); err != nil {
			return err
		}
		// KV writes need a working raft; probe with a write.
		_, err = client.KV().Put(&consulapi.KVPair{Key: "gpushare-testcluster/ready", Value: []byte("1")}, nil)
		return err
	})
}

func (c *Cluster) startNomad() error {
	bin, err := AgentBinary("nomad")
	if err != nil {
		return err
	}
	configure := func(p []int) (*agent, error) {
		return c.nomadAgent(bin, p)
	}
	a, ports, err := startWithRetry(3, configure, c.waitNomad)
	if err != nil {
		return err
	}
	c.nomad, c.nomadPorts = a, ports
	return nil
}

func (c *Cluster) nomadAgent(bin string, p []int) (*agent, error) {
	dir := filepath.Join(c.Dir, "nomad")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating nomad data dir: %w", err)
	}
	server := fmt.Sprintf("server {\n  enabled = true\n  bootstrap_expect = 1\n%s}\n", c.serverGC())
	cfg := c.nomadConfig("", filepath.Join(dir, "data"), p, server, p[1], 0)
	path := filepath.Join(dir, "nomad.hcl")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, fmt.Errorf("writing nomad config: %w", err)
	}
	c.NomadAddr = fmt.Sprintf("http://127.0.0.1:%d", p[0])
	// Plugins and tasks the agent starts inherit NOMAD_ADDR, as on a
	// client host whose environment points at its local agent.
	return &agent{name: "nomad", bin: bin, args: []string{"agent", "-config", path},
		env:     []string{"NOMAD_ADDR=" + c.NomadAddr},
		logPath: filepath.Join(c.Dir, "nomad.log")}, nil
}

// nomadConfig is the configuration of one Nomad agent of the cluster: a
// client with raw_exec and the device plugin (the settings of client
// index plugin) that joins the server at serverRPC, with server (a server
// block, or "" for a client-only agent) and header (e.g. its name) added.
func (c *Cluster) nomadConfig(header, dataDir string, p []int, server string, serverRPC, plugin int) string {
	return fmt.Sprintf(`
%sdatacenter = "dc1"
data_dir = %q
bind_addr = "127.0.0.1"
log_level = "DEBUG"
disable_update_check = true
%s
ports {
  http = %d
  rpc = %d
  serf = %d
}
advertise {
  http = "127.0.0.1"
  rpc = "127.0.0.1"
  serf = "127.0.0.1"
}
%sclient {
  enabled = true
  servers = ["127.0.0.1:%d"]
  network_interface = "lo"
  options = {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
consul {
  address = "127.0.0.1:%s"
  token = %q
}
acl {
  enabled = %t
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
%s
`, header, dataDir, c.pluginDir(), p[0], p[1], p[2], server, serverRPC,
		strings.TrimPrefix(c.ConsulAddr, "http://127.0.0.1:"), c.acl.nomadConsul, c.opts.ACL, c.pluginConfig(plugin))
}

// serverGC is the server block's garbage collection settings.
func (c *Cluster) serverGC() string {
	if c.opts.JobGCThreshold <= 0 {
		return ""
	}
	d := c.opts.JobGCThreshold.String()
	return fmt.Sprintf("  job_gc_threshold = %q\n  job_gc_interval = %q\n", d, d)
}

func (c *Cluster) waitNomad(a *agent) error {
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: c.NomadAddr})
	if err != nil {
		return fmt.Errorf("creating nomad client: %w", err)
	}
	c.Nomad = client
	// With ACLs the plugin reads Nomad only once it has its token.
	waitDevices := !c.opts.ACL || c.pluginToken
	return waitUntil(a, c.opts.StartTimeout, func() error {
		if err := hasLeader(client.Status().Leader()); err != nil {
			return err
		}
		if c.opts.ACL {
			if err := bootstrapNomad(client, c.NomadToken); err != nil {
				return err
			}
		}
		id, err := readyNode(client, func(n *nomadapi.NodeListStub) bool { return !isExtraClient(n.Name) })
		if err != nil {
			return err
		}
		c.NodeID = id
		if len(c.NodeIDs) == 0 {
			c.NodeIDs = []string{id}
		}
		if len(c.opts.WaitForDevices) == 0 || !waitDevices {
			return nil
		}
		return nodeHasDevices(client, id, c.opts.WaitForDevices)
	})
}

// readyNode returns the ID of the node that match picks, once it is
// registered and ready.
func readyNode(client *nomadapi.Client, match func(*nomadapi.NodeListStub) bool) (string, error) {
	nodes, _, err := client.Nodes().List(nil)
	if err != nil {
		return "", err
	}
	for _, n := range nodes {
		if !match(n) {
			continue
		}
		if n.Status != "ready" {
			return "", fmt.Errorf("node %s is %s", n.ID, n.Status)
		}
		return n.ID, nil
	}
	return "", errors.New("client node not registered yet")
}

// nodeHasDevices checks that node id has every wanted device (hasDevices).
func nodeHasDevices(client *nomadapi.Client, id string, wanted []string) error {
	node, _, err := client.Nodes().Info(id, nil)
	if err != nil {
		return err
	}
	return hasDevices(node, wanted)
}

// hasDevices checks that every wanted "vendor/type[/name]" has a device group
// with at least one healthy instance on the node.
func hasDevices(node *nomadapi.Node, wanted []string) error {
	if node.NodeResources == nil {
		return errors.New("node has no resources yet")
	}
	for _, w := range wanted {
		found := false
		for _, g := range node.NodeResources.Devices {
			id := g.Vendor + "/" + g.Type
			if w == id || w == id+"/"+g.Name {
				for _, inst := range g.Instances {
					if inst.Healthy {
						found = true
					}
				}
			}
		}
		if !found {
			return fmt.Errorf("device %q has no healthy instance on node %s yet", w, node.ID)
		}
	}
	return nil
}

// hasLeader turns an agent's answer to "who leads?" into nil once there
// is a leader.
func hasLeader(leader string, err error) error {
	if err != nil {
		return err
	}
	if leader == "" {
		return errors.New("no leader yet")
	}
	return nil
}

// waitUntil polls cond until it succeeds, the agent exits, or the timeout
// passes; the error says which, with cond's last error.
func waitUntil(a *agent, timeout time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if a.exited() {
			return fmt.Errorf("exited before it was ready (%v); last check: %v", a.exitErr, last)
		}
		if last = cond(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s: %w", timeout, last)
		case <-tick.C:
		}
	}
}

// StopNomad stops the Nomad agent (server and client) and leaves the tasks
// it started running, as a Nomad client restart does.
func (c *Cluster) StopNomad() {
	if c.nomad != nil && !c.nomad.exited() {
		c.detached = append(c.detached, descendants(c.nomad.cmd.Process.Pid)...)
		c.nomad.stop(20 * time.Second)
	}
}

// StartNomad starts the Nomad agent again on the same ports and data
// directory, and waits until its node is ready again.
func (c *Cluster) StartNomad() error { return restart(c.nomad, "nomad", c.waitNomad) }

// restart starts a stopped agent again with its ports and data, and waits
// until ready says it is up.
func restart(a *agent, name string, ready func(*agent) error) error {
	if a == nil {
		return fmt.Errorf("%s was never started", name)
	}
	if !a.exited() {
		return fmt.Errorf("%s is still running", name)
	}
	if err := a.start(); err != nil {
		return err
	}
	if err := ready(a); err != nil {
		return a.failure(err)
	}
	return nil
}

// RestartNomad stops and starts the Nomad agent; running tasks survive.
func (c *Cluster) RestartNomad() error {
	c.StopNomad()
	return c.StartNomad()
}

// StopConsul stops the Consul agent; its data is kept for StartConsul.
func (c *Cluster) StopConsul() {
	if c.consul != nil {
		c.consul.stop(20 * time.Second)
	}
}

// StartConsul starts the Consul agent again with its data and ports.
func (c *Cluster) StartConsul() error { return restart(c.consul, "consul", c.waitConsul) }

// NomadLogTail returns the last n lines of the Nomad agent's log.
func (c *Cluster) NomadLogTail(n int) string { return c.nomad.logTail(n) }

// Close stops Nomad, every process below it (plugins, executors, tasks) and
// Consul, then removes the cluster directory if New created it.
func (c *Cluster) Close() error {
	errs := c.stopClients()
	if c.nomad != nil && c.nomad.cmd != nil {
		// Task executors outlive a stopped client by design; collect
		// the whole tree first, then stop the agent, then kill the rest.
		tree := append(descendants(c.nomad.cmd.Process.Pid), c.detached...)
		c.nomad.stop(10 * time.Second)
		tree = append(tree, orphansOf(tree)...)
		if err := killTree(tree, 10*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("nomad: %w", err))
		}
	}
	if c.consul != nil && c.consul.cmd != nil {
		tree := descendants(c.consul.cmd.Process.Pid)
		c.consul.stop(10 * time.Second)
		if err := killTree(tree, 10*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("consul: %w", err))
		}
	}
	if err := unmountUnder(c.Dir); err != nil {
		errs = append(errs, err)
	}
	if c.ownDir && os.Getenv("GPUSHARE_KEEP_CLUSTER") == "" {
		if err := os.RemoveAll(c.Dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", c.Dir, err))
		}
	}
	return errors.Join(errs...)
}

// orphansOf returns processes started below pids after they were listed
// (for example a task an executor forked while the agent stopped).
func orphansOf(pids []int) []int {
	var out []int
	for _, p := range pids {
		out = append(out, descendants(p)...)
	}
	return out
}
