package terraform_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
)

// nomadProviderVersion is the HashiCorp Nomad provider `make tools` builds.
const nomadProviderVersion = "1.4.20"

// workspace is a root module in a temporary directory, run with the
// cached tofu and a filesystem mirror holding HashiCorp's Nomad provider
// (tools cache) and this repository's gpushare provider (built here).
type workspace struct {
	t   *testing.T
	dir string
	env []string
	bin string
}

// newWorkspace copies the root module in src into a temporary directory,
// pointing its module source at modules/ of this checkout, and sets up the
// provider mirror and the CLI configuration.
func newWorkspace(t *testing.T, src string) *workspace {
	t.Helper()
	tools, err := localcluster.ToolsDir()
	if err != nil {
		t.Fatal(err)
	}
	w := &workspace{t: t, dir: t.TempDir(), bin: filepath.Join(tools, "bin", "tofu")}
	if _, err := os.Stat(w.bin); err != nil {
		t.Fatalf("tofu not found: run `make tools` first: %v", err)
	}
	mirror := filepath.Join(t.TempDir(), "mirror")
	platform := runtime.GOOS + "_" + runtime.GOARCH
	nomadDir := filepath.Join(mirror, "registry.opentofu.org/hashicorp/nomad", nomadProviderVersion, platform)
	gpushareDir := filepath.Join(mirror, "registry.opentofu.org/gpushare/gpushare/0.1.0", platform)
	for _, d := range []string{nomadDir, gpushareDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	name := "terraform-provider-nomad_v" + nomadProviderVersion
	if err := os.Symlink(filepath.Join(tools, "bin", name), filepath.Join(nomadDir, name)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tools, "bin", name)); err != nil {
		t.Fatalf("the Nomad provider is not in the tools cache: run `make tools` first: %v", err)
	}
	if err := localcluster.BuildBinary("github.com/gpushare/nomad-gpushare/terraform/cmd/terraform-provider-gpushare",
		filepath.Join(gpushareDir, "terraform-provider-gpushare_v0.1.0")); err != nil {
		t.Fatal(err)
	}
	cli := filepath.Join(t.TempDir(), "tofu.rc")
	rc := "provider_installation {\n  filesystem_mirror {\n    path = \"" + mirror + "\"\n  }\n}\n"
	if err := os.WriteFile(cli, []byte(rc), 0o644); err != nil {
		t.Fatal(err)
	}
	w.env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+cli, "TF_IN_AUTOMATION=1", "TF_INPUT=0",
		"CHECKPOINT_DISABLE=1", "TF_PLUGIN_CACHE_DIR=")
	w.copyRoot(src)
	return w
}

// copyRoot copies the .tf files of src, rewriting the relative module
// source "../../modules/" to this checkout's modules folder (local module
// paths are used in place, so the module finds jobspecs/ beside it).
func (w *workspace) copyRoot(src string) {
	w.t.Helper()
	modules, err := filepath.Abs("modules")
	if err != nil {
		w.t.Fatal(err)
	}
	rel, err := filepath.Rel(w.dir, modules)
	if err != nil {
		w.t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(src, "*.tf"))
	if err != nil || len(files) == 0 {
		w.t.Fatalf("no .tf files in %s: %v", src, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			w.t.Fatal(err)
		}
		data = []byte(strings.ReplaceAll(string(data), `"../../modules/`, `"`+rel+`/`))
		if err := os.WriteFile(filepath.Join(w.dir, filepath.Base(f)), data, 0o644); err != nil {
			w.t.Fatal(err)
		}
	}
}

// vars writes terraform.tfvars.json.
func (w *workspace) vars(v map[string]any) {
	w.t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.dir, "terraform.tfvars.json"), data, 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// tofu runs a tofu command and returns its exit code and output.
func (w *workspace) tofu(args ...string) (int, string) {
	w.t.Helper()
	n := 1 // -no-color goes after the (sub)command
	if args[0] == "state" {
		n = 2
	}
	argv := append(append(append([]string(nil), args[:n]...), "-no-color"), args[n:]...)
	cmd := exec.Command(w.bin, argv...)
	cmd.Dir, cmd.Env = w.dir, w.env
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	}
	w.t.Fatalf("running tofu %s: %v", strings.Join(args, " "), err)
	return 0, ""
}

// must runs a tofu command that must succeed with exit code want (plan
// -detailed-exitcode says 2 for changes).
func (w *workspace) must(want int, args ...string) string {
	w.t.Helper()
	code, out := w.tofu(args...)
	if code != want {
		w.t.Fatalf("tofu %s: exit code %d, want %d:\n%s", strings.Join(args, " "), code, want, out)
	}
	return out
}
