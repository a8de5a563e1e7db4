// Package demo brings up the local gpushare cluster behind `make demo`: a
// Consul agent, a Nomad server+client with the gpushare device plugin on
// simulated GPUs, and the example workloads of jobspecs/examples. It prints
// where everything is and three things to try, and on cancellation stops
// every process it started.
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gpushare/nomad-gpushare/internal/aclpolicy"
	"github.com/gpushare/nomad-gpushare/internal/localcluster"
)

// Paths inside the repository that the demo builds or reads .
const (
	pluginPkg     = "device/cmd/nomad-device-gpushare"
	simloadPkg    = "device/cmd/gpushare-simload"
	pluginConfig  = "jobspecs/demo/plugin.hcl"
	quotaPkg      = "quota-service/cmd/gpushare-quota"
	quotaJob      = "jobspecs/quota-service.nomad.hcl"
	quotasGlob    = "jobspecs/demo/quotas/*.json"
	examplesGlob  = "jobspecs/examples/*.nomad.hcl"
	modulePath    = "github.com/gpushare/nomad-gpushare"
	readyBanner   = "gpushare demo is up. Press Ctrl-C to stop it."
	stoppedBanner = "gpushare demo stopped; no process left behind."
)

// Config says where the demo runs.
type Config struct {
	// RepoRoot is the repository checkout.
	RepoRoot string
	// Dir holds the demo's binaries, agent data and logs; it is emptied
	// at start.
	Dir string
	// Out receives what a person reads.
	Out io.Writer
	// Ready, when set, is called once everything is up.
	Ready func(*localcluster.Cluster)
	// ACL runs Consul and Nomad with ACLs on (default deny): the plugin
	// and the quota service run on tokens made from the shipped
	// policies (jobspecs/acl), and the env file carries management
	// tokens for the CLIs.
	ACL bool
	// Screenshot, when set, makes Run play the reclaim story once the
	// demo is up (jobspecs/demo/reclaim), write a PNG of the dashboard
	// there, and stop.
	Screenshot string
}

// Run starts the demo and blocks until ctx is cancelled, then stops it.
func Run(ctx context.Context, cfg Config) error {
	if err := os.RemoveAll(cfg.Dir); err != nil {
		return fmt.Errorf("clearing %s: %w", cfg.Dir, err)
	}
	pluginDir := filepath.Join(cfg.Dir, "plugins")
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", pluginDir, err)
	}

	opts := localcluster.Options{Dir: filepath.Join(cfg.Dir, "cluster")}
	fmt.Fprintf(cfg.Out, "building the device plugin (%s)\n", pluginPkg)
	out := filepath.Join(pluginDir, "nomad-device-gpushare")
	if err := localcluster.BuildBinary(modulePath+"/"+pluginPkg, out); err != nil {
		return fmt.Errorf("building the device plugin: %w", err)
	}
	simload := filepath.Join(cfg.Dir, "bin", "gpushare-simload")
	if err := localcluster.BuildBinary(modulePath+"/"+simloadPkg, simload); err != nil {
		return fmt.Errorf("building the simulated GPU workload: %w", err)
	}
	plugin, err := PluginConfig(cfg.RepoRoot, cfg.Dir)
	if err != nil {
		return err
	}
	opts.PluginDir = pluginDir
	opts.PluginConfig = plugin.Config
	opts.WaitForDevices = []string{"nvidia/gpu"}
	if cfg.ACL {
		policy, err := aclpolicy.Read(cfg.RepoRoot, aclpolicy.PluginNomad)
		if err != nil {
			return err
		}
		opts.ACL, opts.PluginPolicy = true, policy
	}

	fmt.Fprintln(cfg.Out, "starting Consul and Nomad")
	cluster, err := localcluster.New(opts)
	if err != nil {
		return err
	}
	defer func() {
		if err := cluster.Close(); err != nil {
			fmt.Fprintf(cfg.Out, "stopping: %v\n", err)
			return
		}
		fmt.Fprintln(cfg.Out, stoppedBanner)
	}()

	quotaURL, err := startQuotaService(ctx, cluster, cfg, plugin.UsagePort)
	if err != nil {
		return err
	}
	jobs, err := runExamples(cluster, cfg.RepoRoot)
	if err != nil {
		return err
	}
	sim := fractionVars{Simload: simload, ProcessDir: plugin.ProcessDir}
	if err := writeEnv(cfg.Dir, cluster, sim); err != nil {
		return err
	}
	printWelcome(cfg.Out, cfg.Dir, cluster, jobs, quotaURL, plugin.UsagePort)
	if cfg.Ready != nil {
		cfg.Ready(cluster)
	}
	if cfg.Screenshot != "" {
		return showReclaim(ctx, cluster, cfg, quotaURL)
	}
	<-ctx.Done()
	fmt.Fprintln(cfg.Out, "\nstopping the demo")
	return nil
}

// runExamples registers every example job and returns their IDs.
func runExamples(c *localcluster.Cluster, root string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(root, examplesGlob))
	if err != nil {
		return nil, fmt.Errorf("listing examples: %w", err)
	}
	sort.Strings(files)
	var ids []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		job, err := c.Nomad.Jobs().ParseHCL(string(src), true)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", f, err)
		}
		if _, _, err := c.Nomad.Jobs().Register(job, nil); err != nil {
			return nil, fmt.Errorf("submitting %s: %w", f, err)
		}
		ids = append(ids, *job.ID)
	}
	return ids, nil
}

// writeEnv writes dir/env: the agents' addresses, the CLIs on PATH, the
// input variables of the dynamic-fractions story's job files (Nomad's CLI
// reads NOMAD_VAR_<name>), and with ACLs on the management tokens.
func writeEnv(dir string, c *localcluster.Cluster, sim fractionVars) error {
	tools, err := localcluster.ToolsDir()
	if err != nil {
		return err
	}
	env := fmt.Sprintf("export PATH=%q:\"$PATH\"\nexport NOMAD_ADDR=%q\nexport CONSUL_HTTP_ADDR=%q\n",
		filepath.Join(tools, "bin"), c.NomadAddr, c.ConsulAddr)
	env += fmt.Sprintf("# The simulated GPU workload of jobspecs/demo/fractions.\nexport NOMAD_VAR_simload=%q\nexport NOMAD_VAR_process_dir=%q\n",
		sim.Simload, sim.ProcessDir)
	if c.NomadToken != "" {
		env += fmt.Sprintf("# Management tokens (ACLs are on).\nexport NOMAD_TOKEN=%q\nexport CONSUL_HTTP_TOKEN=%q\n",
			c.NomadToken, c.ConsulToken)
	}
	if err := os.WriteFile(filepath.Join(dir, "env"), []byte(env), 0o600); err != nil {
		return fmt.Errorf("writing %s/env: %w", dir, err)
	}
	return nil
}

func printWelcome(w io.Writer, dir string, c *localcluster.Cluster, jobs []string, quotaURL string, usagePort int) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nConsul UI:  %s/ui  (quotas and state under Key/Value > gpushare)\n", c.ConsulAddr)
	if quotaURL != "" {
		fmt.Fprintf(&b, "Quotas:     %s/  (dashboard; %s/v1/projects, %s/metrics)\n", quotaURL, quotaURL, quotaURL)
		if c.NomadToken != "" {
			fmt.Fprintf(&b, "            the dashboard asks for a Nomad token: NOMAD_TOKEN in %s/env\n", dir)
		}
	}
	fmt.Fprintf(&b, "Nomad API:  %s (the source-built agent has no web UI; use the CLI)\n", c.NomadAddr)
	fmt.Fprintf(&b, "Logs:       %s\n", c.Dir)
	if c.NomadToken != "" {
		fmt.Fprintf(&b, "ACLs:       on, default deny; management tokens in %s/env (the Consul UI asks for CONSUL_HTTP_TOKEN)\n", dir)
	}
	if len(jobs) > 0 {
		fmt.Fprintf(&b, "Submitted:  %s\n", strings.Join(jobs, ", "))
	}
	fmt.Fprintf(&b, "\nIn another terminal, `source %s/env`, then try:\n", dir)
	fmt.Fprintf(&b, "  1. nomad node status -verbose %s   # the node's GPUs: whole and shared families\n", c.NodeID)
	fmt.Fprintf(&b, "  2. nomad job status                # the example workloads\n")
	fmt.Fprintf(&b, "  3. nomad alloc logs -job <job>     # what a share sees: its GPU UUID and memory limit\n")
	fmt.Fprintf(&b, "\nDynamic fractions, the two-GPU story (watch the dashboard's GPU map, or\ncurl -s http://127.0.0.1:%d/v1/usage, the node's usage report):\n", usagePort)
	for _, step := range fractionStory {
		fmt.Fprintf(&b, "  %-58s # %s\n", step.command, step.what)
	}
	fmt.Fprintf(&b, "\n%s\n", readyBanner)
	fmt.Fprint(w, b.String())
}
