package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// cli is the name of the command that runs the provider, "tofu" or
// "terraform", for the commands that messages tell people to run: the
// provider's parent process, as Linux names it. Elsewhere, or when it
// cannot be read, "terraform".
var cli = cliName(parentCommand())

// parentCommand is the name of the parent process's executable, or "".
func parentCommand() string {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", os.Getppid()))
	if err != nil {
		return ""
	}
	return filepath.Base(exe)
}

// cliName maps an executable's name to the CLI it is: OpenTofu's tofu
// (also under a versioned name such as tofu-1.10), else terraform.
func cliName(command string) string {
	if strings.HasPrefix(command, "tofu") {
		return "tofu"
	}
	return "terraform"
}

// importCommand is the command that adopts an existing object into the
// state, e.g. `tofu import <address> default/nomad/jobs/gpushare-quota`.
func importCommand(id string) string {
	return fmt.Sprintf("`%s import <address> %s`", cli, id)
}
