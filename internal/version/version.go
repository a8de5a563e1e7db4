// Package version holds the release version of gpushare's binaries (the
// device plugin, the quota service, the Terraform provider). `make dist`
// sets it at link time:
//
//	go build -ldflags "-X github.com/gpushare/nomad-gpushare/internal/version.Version=0.2.0"
//
// A plain `go build` reports "dev".
package version

import (
	"fmt"
	"runtime"
)

// Version is the release version, without a leading "v"; "dev" when not
// set at link time.
var Version = "dev"

// Commit is the source revision the binary was built from, set at link
// time like Version; empty when unknown.
var Commit = ""

// String is what a binary's -version prints: its name, the version, the
// commit when known, and the Go toolchain and platform.
func String(binary string) string {
	s := binary + " " + Version
	if Commit != "" {
		s += " (" + Commit + ")"
	}
	return fmt.Sprintf("%s %s %s/%s", s, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// Requested reports whether args (a command line without the program
// name) ask for the version: -version or --version as the only argument.
// The device plugin and the Terraform provider check it before they serve
// their plugin protocol, which takes no arguments.
func Requested(args []string) bool {
	return len(args) == 1 && (args[0] == "-version" || args[0] == "--version")
}
