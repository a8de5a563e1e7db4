package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// quotaService is the Consul service name the quota service registers.
const quotaService = "gpushare-quota"

// startQuotaService writes the demo's quotas into Consul KV, creates a Nomad
// namespace for each, builds the quota service and runs its job, and returns
// the address of a healthy instance's HTTP API.
func startQuotaService(ctx context.Context, c *localcluster.Cluster, cfg Config, usagePort int) (string, error) {
	projects, err := seedQuotas(c, cfg.RepoRoot)
	if err != nil {
		return "", err
	}
	if cfg.ACL {
		if err := storeServiceTokens(c, cfg.RepoRoot, projects); err != nil {
			return "", err
		}
	}
	fmt.Fprintf(cfg.Out, "building the quota service (%s)\n", quotaPkg)
	bin := filepath.Join(cfg.Dir, "bin", "gpushare-quota")
	if err := localcluster.BuildBinary(modulePath+"/"+quotaPkg, bin); err != nil {
		return "", fmt.Errorf("building the quota service: %w", err)
	}
	src, err := os.ReadFile(filepath.Join(cfg.RepoRoot, quotaJob))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", quotaJob, err)
	}
	// A one-node demo needs a fraction of the jobspec's defaults, which
	// are sized for about 1,000 GPU nodes. Its agents may run as a normal
	// user, where Nomad's exec driver cannot isolate a task: the demo runs
	// the service on raw_exec, which its client enables.
	// It reads the node's usage report every 2 seconds, so that the
	// dashboard follows the dynamic-fractions story as it plays.
	vars := fmt.Sprintf("driver = \"raw_exec\"\nbinary = %q\nnomad_addr = %q\nconsul_addr = %q\ntokens_from_variable = %t\nmemory_mb = 128\ncpu_mhz = 200\nusage_port = %d\nusage_period = \"2s\"\n",
		bin, c.NomadAddr, strings.TrimPrefix(c.ConsulAddr, "http://"), cfg.ACL, usagePort)
	job, err := c.Nomad.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{
		JobHCL: string(src), Variables: vars, Canonicalize: true})
	if err != nil {
		return "", fmt.Errorf("parsing %s: %w", quotaJob, err)
	}
	if _, _, err := c.Nomad.Jobs().Register(job, nil); err != nil {
		return "", fmt.Errorf("submitting %s: %w", quotaJob, err)
	}
	fmt.Fprintln(cfg.Out, "waiting for the quota service to pass its health check")
	return waitHealthy(ctx, c.Consul, 2*time.Minute)
}

// seedQuotas puts each jobspecs/demo/quotas/<project>.json into KV,
// creates the project's namespace, and returns the projects.
func seedQuotas(c *localcluster.Cluster, root string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(root, quotasGlob))
	if err != nil {
		return nil, fmt.Errorf("listing quotas: %w", err)
	}
	sort.Strings(files)
	var projects []string
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		project := strings.TrimSuffix(filepath.Base(f), ".json")
		projects = append(projects, project)
		key := "gpushare/quotas/" + project
		if _, err := c.Consul.KV().Put(&consulapi.KVPair{Key: key, Value: doc}, nil); err != nil {
			return nil, fmt.Errorf("writing %s: %w", key, err)
		}
		if project == "default" {
			continue
		}
		ns := &nomadapi.Namespace{Name: project, Description: "gpushare project " + project}
		if _, err := c.Nomad.Namespaces().Register(ns, nil); err != nil {
			return nil, fmt.Errorf("creating namespace %s: %w", project, err)
		}
	}
	return projects, nil
}

// waitHealthy polls Consul until an instance of the quota service passes
// its health check, and returns its HTTP address.
func waitHealthy(ctx context.Context, consul *consulapi.Client, timeout time.Duration) (string, error) {
	urls, err := quotaInstances(ctx, consul, 1, timeout)
	if err != nil {
		return "", err
	}
	return urls[0], nil
}

// quotaInstances polls Consul until n instances of the quota service pass
// their health check, and returns their HTTP addresses, sorted.
func quotaInstances(ctx context.Context, consul *consulapi.Client, n int, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		entries, _, err := consul.Health().Service(quotaService, "", true, nil)
		if err == nil && len(entries) >= n {
			var urls []string
			for _, e := range entries {
				urls = append(urls, fmt.Sprintf("http://%s:%d", e.Service.Address, e.Service.Port))
			}
			sort.Strings(urls)
			return urls, nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("%d of %d instances pass their health check", len(entries), n)
			}
			return nil, fmt.Errorf("quota service not healthy after %s: %w", timeout, err)
		case <-tick.C:
		}
	}
}
