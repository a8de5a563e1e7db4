// Command nomad-device-gpushare is the gpushare Nomad device plugin binary.
// Put it in the Nomad client's plugin_dir and configure it with a
// `plugin "nomad-device-gpushare" { config { ... } }` block
// (docs/operator.md). Nomad starts it; `nomad-device-gpushare -version`
// prints its version.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/gpushare/nomad-gpushare/device"
	"github.com/gpushare/nomad-gpushare/internal/version"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins"
)

// memoryLimit is the Go runtime's soft memory limit unless GOMEMLIMIT is
// set. The plugin's live heap is small (a few MiB for 8 GPUs), but every
// stats response is converted to ~100 protobuf messages per share group,
// and with the default GC target that garbage alone doubles the heap. The
// limit makes the GC collect earlier (keeping the plugin's RSS near 37 MiB
// on 8 GPUs, 25 MiB of it the binary's text); it is soft, so a larger node
// only costs GC time, capped by the runtime.
const memoryLimit = 16 << 20

func main() {
	if version.Requested(os.Args[1:]) {
		fmt.Println(version.String("nomad-device-gpushare"))
		return
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	plugins.Serve(func(logger hclog.Logger) interface{} { return device.New(logger) })
}
