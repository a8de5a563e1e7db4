// Command dist builds gpushare's release archives and their SHA256SUMS
// (package internal/dist); `make dist` runs it:
//
//	go run ./tools/dist -version 0.2.0 -out dist -platforms linux/amd64,linux/arm64
//
// CC_LINUX_ARM64 (and CC_<OS>_<ARCH> for any platform) names the C
// compiler the device plugin's cgo uses for that platform.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/gpushare/nomad-gpushare/internal/dist"
)

func main() {
	version := flag.String("version", "", "the release version, without a leading v (required)")
	commit := flag.String("commit", "", "the source revision, shown by each binary's -version")
	out := flag.String("out", "dist", "directory for the archives and SHA256SUMS")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch pairs")
	flag.Parse()
	cc := map[string]string{}
	for _, p := range strings.Split(*platforms, ",") {
		if v := os.Getenv("CC_" + strings.ToUpper(strings.ReplaceAll(p, "/", "_"))); v != "" {
			cc[p] = v
		}
	}
	_, err := dist.Build(dist.Options{Root: ".", Out: *out, Version: *version, Commit: *commit,
		Platforms: strings.Split(*platforms, ","), CC: cc, Log: os.Stdout})
	if err != nil {
		fmt.Fprintln(os.Stderr, "dist:", err)
		os.Exit(1)
	}
	fmt.Printf("dist: archives and SHA256SUMS in %s\n", *out)
}
