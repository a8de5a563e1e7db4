package demo

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
)

// PluginSetup is the demo's plugin block made ready to run on this machine.
type PluginSetup struct {
	// Config is jobspecs/demo/plugin.hcl with its usage endpoint on a free
	// port of 127.0.0.1 and its simulated processes under a directory of
	// the caller's.
	Config string
	// UsagePort is the port of the plugin's usage report.
	UsagePort int
	// ProcessDir is where gpushare-simload tasks write what they use
	// (their -state-dir); every task may write there.
	ProcessDir string
}

var (
	usageListenLine = regexp.MustCompile(`(?m)^(\s*usage_listen\s*=\s*)".*"\s*$`)
	processDirLine  = regexp.MustCompile(`(?m)^(\s*simulated_process_dir\s*=\s*)".*"\s*$`)
)

// PluginConfig reads the demo's plugin block from the repository at root
// and points its usage endpoint at a free port and its simulated processes
// at dir/processes, so that several demos (or tests) run side by side.
func PluginConfig(root, dir string) (*PluginSetup, error) {
	raw, err := os.ReadFile(filepath.Join(root, pluginConfig))
	if err != nil {
		return nil, fmt.Errorf("reading the plugin's client config: %w", err)
	}
	if !usageListenLine.Match(raw) || !processDirLine.Match(raw) {
		return nil, fmt.Errorf("%s: want a usage_listen and a simulated_process_dir line in its config block, for the demo to fill in", pluginConfig)
	}
	s := &PluginSetup{ProcessDir: filepath.Join(dir, "processes")}
	if err := os.MkdirAll(s.ProcessDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", s.ProcessDir, err)
	}
	// Tasks may run as another user (nobody under exec): any may write.
	if err := os.Chmod(s.ProcessDir, 0o777); err != nil {
		return nil, fmt.Errorf("opening %s to tasks: %w", s.ProcessDir, err)
	}
	if s.UsagePort, err = freePort(); err != nil {
		return nil, err
	}
	cfg := usageListenLine.ReplaceAll(raw, []byte(fmt.Sprintf(`${1}"127.0.0.1:%d"`, s.UsagePort)))
	cfg = processDirLine.ReplaceAll(cfg, []byte(fmt.Sprintf(`${1}%q`, s.ProcessDir)))
	s.Config = string(cfg)
	return s, nil
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port for the usage report: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
