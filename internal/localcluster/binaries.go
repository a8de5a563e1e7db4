package localcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ToolsDir is the directory holding the pinned agent binaries: the
// GPUSHARE_TOOLS_DIR environment variable, or gpushare/tools under the
// user's cache directory (the same place tools/build-agents.sh uses).
func ToolsDir() (string, error) {
	if dir := os.Getenv("GPUSHARE_TOOLS_DIR"); dir != "" {
		return dir, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("locating the tools cache: %w (set GPUSHARE_TOOLS_DIR)", err)
	}
	return filepath.Join(cache, "gpushare", "tools"), nil
}

// AgentBinary returns the path of the cached agent binary name ("nomad" or
// "consul"), or an error telling how to build it.
func AgentBinary(name string) (string, error) {
	dir, err := ToolsDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "bin", name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s agent not found at %s: run `make tools` first: %w", name, path, err)
	}
	return path, nil
}

// BuildBinary builds the Go main package pkg (an import path of this module,
// for example "github.com/gpushare/nomad-gpushare/device/cmd/nomad-device-gpushare")
// into the file out. The build error, if any, carries the compiler's output.
func BuildBinary(pkg, out string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	output, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, output)
	}
	return nil
}
