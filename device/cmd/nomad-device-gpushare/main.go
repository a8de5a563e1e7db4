// Command nomad-device-gpushare is the gpushare Nomad device plugin binary.
// Put it in the Nomad client's plugin_dir and configure it with a
// `plugin "nomad-device-gpushare" { config { ... } }` block.
package main

import (
	"github.com/gpushare/nomad-gpushare/device"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins"
)

func main() {
	plugins.Serve(func(logger hclog.Logger) interface{} { return device.New(logger) })
}
