package dist

import (
	"bufio"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/demo"
	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// TestInstallFromArchives installs gpushare as an operator would, from
// the release archives alone: the Nomad client loads the plugin from its
// plugin_dir (unpacked from the plugin's archive; simulated GPUs stand in
// for NVML), the quota service's job comes from its archive and fetches
// that archive over HTTP with its checksum from SHA256SUMS, on the exec
// driver where the client can run it, and a reclaim happens.
func TestInstallFromArchives(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs real agents; run without -short")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var comps []Component
	for _, c := range Components {
		if c.Name != "terraform-provider-gpushare" {
			comps = append(comps, c)
		}
	}
	const version = "0.0.0-install-test"
	archives, err := Build(Options{Root: root, Out: out, Version: version, Commit: "test",
		Platforms: []string{runtime.GOOS + "/" + runtime.GOARCH}, Components: comps})
	if err != nil {
		t.Fatal(err)
	}
	pluginArchive, quotaDir := t.TempDir(), t.TempDir()
	unpack(t, archives[0].Path, pluginArchive)
	unpack(t, archives[1].Path, quotaDir)
	// The plugin_dir holds the binary only, as docs/operator.md installs it.
	pluginDir := t.TempDir()
	bin, err := os.ReadFile(filepath.Join(pluginArchive, "nomad-device-gpushare"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pluginDir, "nomad-device-gpushare"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for dir, name := range map[string]string{pluginDir: "nomad-device-gpushare", quotaDir: "gpushare-quota"} {
		got, err := exec.Command(filepath.Join(dir, name), "-version").Output()
		if err != nil || !strings.HasPrefix(string(got), name+" "+version+" ") {
			t.Errorf("%s -version: %q, %v", name, got, err)
		}
	}

	// The simulated GPUs of the demo stand in for the NVIDIA driver.
	simulated, err := demo.PluginConfig(root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := testcluster.Start(t, localcluster.Options{PluginDir: pluginDir, PluginConfig: simulated.Config,
		WaitForDevices: []string{"nvidia/gpu", "nvidia/gpu-share"}})
	for _, p := range []string{"team-a", "team-b"} {
		if _, err := c.Consul.KV().Put(&consulapi.KVPair{Key: "gpushare/quotas/" + p, Value: []byte(`{"guaranteed": 2}`)}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Nomad.Namespaces().Register(&nomadapi.Namespace{Name: p}, nil); err != nil {
			t.Fatal(err)
		}
	}

	files := httptest.NewServer(http.FileServer(http.Dir(out)))
	defer files.Close()
	name := filepath.Base(archives[1].Path)
	job, err := os.ReadFile(filepath.Join(quotaDir, "quota-service.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	driver := execDriver(t, c)
	vars := strings.Join([]string{
		`driver = "` + driver + `"`,
		`artifact_url = "` + files.URL + "/" + name + `"`,
		`artifact_checksum = "sha256:` + sumOf(t, filepath.Join(out, "SHA256SUMS"), name) + `"`,
		`nomad_addr = "` + c.NomadAddr + `"`,
		`consul_addr = "` + strings.TrimPrefix(c.ConsulAddr, "http://") + `"`,
		`memory_mb = 128`, `cpu_mhz = 200`,
	}, "\n")
	parsed, err := c.Nomad.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: string(job), Variables: vars, Canonicalize: true})
	if err != nil {
		t.Fatalf("parsing the archive's job: %v", err)
	}
	if _, _, err := c.Nomad.Jobs().Register(parsed, nil); err != nil {
		t.Fatalf("registering the archive's job: %v", err)
	}
	testcluster.Eventually(t, 3*time.Minute, func() error {
		entries, _, err := c.Consul.Health().Service("gpushare-quota", "", true, nil)
		if err != nil {
			return err
		}
		if len(entries) == 0 {
			return errors.New("no instance of the quota service passes its health check")
		}
		return nil
	})
	testcluster.ReclaimOneGPU(t, c, kvlayout.New(""))
}

// execDriver is "exec" when the client can run exec tasks, else
// "raw_exec", saying why.
func execDriver(t *testing.T, c *localcluster.Cluster) string {
	t.Helper()
	node, _, err := c.Nomad.Nodes().Info(c.NodeID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := node.Drivers["exec"]; d != nil && d.Detected && d.Healthy {
		return "exec"
	}
	reason := "not detected"
	if d := node.Drivers["exec"]; d != nil {
		reason = d.HealthDescription
	}
	t.Logf("the exec driver is unavailable on this client (%s): the archive's job runs on raw_exec", reason)
	return "raw_exec"
}

// sumOf is name's checksum in the SHA256SUMS file at path.
func sumOf(t *testing.T, path, name string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if sum, file, ok := strings.Cut(sc.Text(), "  "); ok && file == name {
			return sum
		}
	}
	t.Fatalf("%s has no line for %s", path, name)
	return ""
}
