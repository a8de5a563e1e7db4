package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/actuator"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/quota-service/utilization"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	"github.com/gpushare/nomad-gpushare/vocab/nodedemand"
	nomadapi "github.com/hashicorp/nomad/api"
)

// options are the daemon's settings from flags and the environment.
type options struct {
	// nomadAddr and consulAddr override NOMAD_ADDR and CONSUL_HTTP_ADDR
	// when set.
	nomadAddr, consulAddr string
	// nomadTokenFile and consulTokenFile name files holding the tokens.
	nomadTokenFile, consulTokenFile string
	layout                          kvlayout.Layout
	listen                          string
	// pprofListen is the loopback address of the Go profiling endpoint
	// (empty: none).
	pprofListen                 string
	tlsCert, tlsKey             string
	interval, staleness, resync time.Duration
	cycleGap                    time.Duration
	// gangHold bounds how long a gang runs in part.
	gangHold time.Duration
	// maxMoves and moveCooldown bound consolidation (0 moves: off).
	maxMoves     int
	moveCooldown time.Duration
	// fairHalfLife turns on time-aware fair share (0: off);
	// fairUsageWeight weighs the past use.
	fairHalfLife               time.Duration
	fairUsageWeight            float64
	policy, instance, logLevel string
	// maxRecordBytes bounds a suspension record (it holds the job spec).
	maxRecordBytes int
	// usagePort is the device plugins' usage_listen port (0: read no GPU
	// usage); usagePeriod how often the GPU nodes are read.
	usagePort   int
	usagePeriod time.Duration
	// publishRanks: write the placement ranks as node metadata.
	publishRanks bool
	// demand: publishing each node's demand for its idle GPUs.
	demand service.DemandConfig
	// recordKeyFile, else the Nomad Variable recordKeyVar in
	// recordKeyNamespace, holds the keys that sign suspension records.
	recordKeyFile, recordKeyVar, recordKeyNamespace string
	// version: print the version and exit.
	version bool
}

// removedFlags took tokens on the command line.
var removedFlags = map[string]string{
	"nomad-token":  "set NOMAD_TOKEN or -nomad-token-file",
	"consul-token": "set CONSUL_HTTP_TOKEN or -consul-token-file",
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parseOptions reads the flags over the environment.
func parseOptions(args []string) (*options, error) {
	if err := refuseTokenFlags(args); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	o := &options{}
	defs, prefix := newFlags(o, fmt.Sprintf("%s-%d", host, os.Getpid()))
	if err := errors.Join(defs.errs...); err != nil {
		return nil, err
	}
	if err := defs.fs.Parse(args); err != nil {
		return nil, err
	}
	o.layout = kvlayout.New(*prefix)
	if o.version {
		return o, nil
	}
	return o, o.validate()
}

// newFlags defines the daemon's flags on a new flag set, their defaults
// read from the environment, and returns them with the -kv-prefix value.
// The flag reference in docs/operator.md is rendered from it
// (reference_test.go). instance is the default of -instance.
func newFlags(o *options, instance string) (*flagDefs, *string) {
	d := &flagDefs{fs: flag.NewFlagSet("gpushare-quota", flag.ContinueOnError), env: map[string]string{}}
	d.str(&o.nomadAddr, "nomad-addr", "", "", "Nomad HTTP address (default NOMAD_ADDR, else http://127.0.0.1:4646)")
	d.env["nomad-addr"] = "NOMAD_ADDR"
	d.str(&o.nomadTokenFile, "nomad-token-file", "GPUSHARE_NOMAD_TOKEN_FILE", "", "file holding the Nomad ACL token (default: NOMAD_TOKEN)")
	d.str(&o.consulAddr, "consul-addr", "", "", "Consul HTTP address (default CONSUL_HTTP_ADDR, else 127.0.0.1:8500)")
	d.env["consul-addr"] = "CONSUL_HTTP_ADDR"
	d.str(&o.consulTokenFile, "consul-token-file", "", "", "file holding the Consul ACL token (default: CONSUL_HTTP_TOKEN_FILE, else CONSUL_HTTP_TOKEN)")
	d.env["consul-token-file"] = "CONSUL_HTTP_TOKEN_FILE"
	prefix := new(string)
	d.str(prefix, "kv-prefix", "GPUSHARE_KV_PREFIX", kvlayout.DefaultRoot, "root of the service's Consul KV keys")
	d.str(&o.listen, "listen", "GPUSHARE_LISTEN", "127.0.0.1:9646", "HTTP API listen address (the default answers this host only)")
	d.str(&o.pprofListen, "pprof-listen", "GPUSHARE_PPROF_LISTEN", "", "loopback address (such as 127.0.0.1:6060) of a Go profiling endpoint, /debug/pprof/ without authentication, for `go tool pprof` (empty: none)")
	d.str(&o.tlsCert, "tls-cert", "GPUSHARE_TLS_CERT", "", "PEM certificate (chain) file: serve the API over HTTPS")
	d.str(&o.tlsKey, "tls-key", "GPUSHARE_TLS_KEY", "", "PEM private key file of -tls-cert")
	d.duration(&o.interval, "plan-interval", "GPUSHARE_PLAN_INTERVAL", service.DefaultPlanInterval, "safety-net plan period (without the event stream: full re-list period)")
	d.duration(&o.cycleGap, "cycle-gap", "GPUSHARE_CYCLE_GAP", service.DefaultCycleGap, "least time between the starts of two of the leader's cycles while Nomad is busy: lower decides sooner after an event and spends more CPU (10ms to 10s)")
	d.duration(&o.resync, "resync-interval", "GPUSHARE_RESYNC_INTERVAL", nomadwatch.DefaultResyncInterval, "how often the view the event stream keeps is checked against a full listing of Nomad")
	d.duration(&o.staleness, "max-staleness", "GPUSHARE_MAX_STALENESS", actuator.DefaultMaxStaleness, "take no action on data listed longer ago")
	d.duration(&o.gangHold, "gang-partial-hold", "GPUSHARE_GANG_PARTIAL_HOLD", service.DefaultGangPartialHold, "longest a gang job (meta gpushare.gang) runs in part while Nomad places the rest; then it is suspended whole and comes back when all of it fits")
	d.integer(&o.maxMoves, "max-moves", "GPUSHARE_MAX_MOVES", plan.DefaultMaxMoves, "most jobs with meta gpushare.movable = \"true\" one cycle moves to another node to place work that fits nowhere (0: none)")
	d.duration(&o.moveCooldown, "move-cooldown", "GPUSHARE_MOVE_COOLDOWN", service.DefaultMoveCooldown, "how long a movable job runs before it may be moved, and so the shortest time between two moves of it")
	d.duration(&o.fairHalfLife, "fair-share-half-life", "GPUSHARE_FAIR_SHARE_HALF_LIFE", 0, "time-aware fair share: a project's share of the surplus shrinks with its use of it, decayed with this half-life (e.g. 24h; 0: off)")
	d.float(&o.fairUsageWeight, "fair-share-usage-weight", "GPUSHARE_FAIR_SHARE_USAGE_WEIGHT", 1, "how much past use of the surplus weighs in time-aware fair share (above 0)")
	d.str(&o.policy, "policy", "GPUSHARE_POLICY", "gpushare", "placement policy for idle capacity")
	d.integer(&o.maxRecordBytes, "max-record-bytes", "GPUSHARE_MAX_RECORD_BYTES", state.DefaultMaxRecordBytes, "largest suspension record written to Consul: a job whose spec would not fit is never suspended (keep it at or below Consul's kv_max_value_size)")
	d.integer(&o.usagePort, "usage-port", "GPUSHARE_USAGE_PORT", 0, "the device plugins' usage_listen port (0: read no GPU usage)")
	d.duration(&o.usagePeriod, "usage-period", "GPUSHARE_USAGE_PERIOD", utilization.DefaultPeriod, "how often the GPU nodes' usage is read")
	d.boolean(&o.publishRanks, "publish-ranks", "GPUSHARE_PUBLISH_RANKS", true, "write placement ranks as Nomad dynamic node metadata gpushare.rank.<class> (the token needs node:write); GPU jobs with the ranking affinity then land where they fragment no GPU")
	d.boolean(&o.demand.Publish, "publish-demand", "GPUSHARE_PUBLISH_DEMAND", true, "publish each GPU node's demand (the whole and share requests the plan places there) as Nomad Variables under -demand-var, with a heartbeat (the token needs variables write there); device plugins then stop listing blocked evaluations and pre-position idle GPUs")
	d.str(&o.demand.Prefix, "demand-var", "GPUSHARE_DEMAND_VAR", nodedemand.DefaultPrefix, "path prefix of the published demand's Nomad Variables (<prefix>/leader, <prefix>/nodes/<node ID>); the plugins' demand_var must match")
	d.str(&o.demand.Namespace, "demand-namespace", "GPUSHARE_DEMAND_NAMESPACE", nodedemand.DefaultNamespace, "namespace of the published demand's variables")
	d.duration(&o.demand.Beat, "demand-beat", "GPUSHARE_DEMAND_BEAT", nodedemand.DefaultBeat, "heartbeat period of the published demand: plugins read Nomad themselves after 3 beats without one")
	d.str(&o.recordKeyFile, "record-key-file", "GPUSHARE_RECORD_KEY_FILE", "", "file holding the keys that sign suspension records (base64, current key first, then previous ones); default: the Nomad Variable -record-key-var")
	d.str(&o.recordKeyVar, "record-key-var", "GPUSHARE_RECORD_KEY_VAR", service.DefaultRecordKeyPath, "Nomad Variable holding the record keys (items key and previous), created with a new key when absent")
	d.str(&o.recordKeyNamespace, "record-key-namespace", "GPUSHARE_RECORD_KEY_NAMESPACE", "default", "namespace of -record-key-var: one only operators may read")
	d.str(&o.instance, "instance", "GPUSHARE_INSTANCE", instance, "name of this instance, unique among the instances")
	d.str(&o.logLevel, "log-level", "GPUSHARE_LOG_LEVEL", "info", "log level: trace, debug, info, warn or error; at debug the service logs every plan that differs from the last (its actions, and why the work it leaves waiting waits) and each action it holds back, with why")
	d.fs.BoolVar(&o.version, "version", false, "print the version and exit")
	return d, prefix
}

// flagDefs defines flags whose defaults come from environment variables,
// and records which variable each reads.
type flagDefs struct {
	fs *flag.FlagSet
	// env: the environment variable of each flag that has one.
	env map[string]string
	// errs: environment values that do not parse.
	errs []error
}

func (d *flagDefs) str(p *string, name, envName, def, usage string) {
	if envName != "" {
		d.env[name] = envName
		def = env(envName, def)
	}
	d.fs.StringVar(p, name, def, usage)
}

func (d *flagDefs) duration(p *time.Duration, name, envName string, def time.Duration, usage string) {
	d.env[name] = envName
	v, err := durationEnv(envName, def)
	d.errs = append(d.errs, err)
	d.fs.DurationVar(p, name, v, usage)
}

func (d *flagDefs) integer(p *int, name, envName string, def int, usage string) {
	d.env[name] = envName
	v, err := intEnv(envName, def)
	d.errs = append(d.errs, err)
	d.fs.IntVar(p, name, v, usage)
}

func (d *flagDefs) float(p *float64, name, envName string, def float64, usage string) {
	d.env[name] = envName
	v, err := floatEnv(envName, def)
	d.errs = append(d.errs, err)
	d.fs.Float64Var(p, name, v, usage)
}

func (d *flagDefs) boolean(p *bool, name, envName string, def bool, usage string) {
	d.env[name] = envName
	v, err := boolEnv(envName, def)
	d.errs = append(d.errs, err)
	d.fs.BoolVar(p, name, v, usage)
}

func (o *options) validate() error {
	if o.interval <= 0 || o.staleness <= 0 || o.usagePeriod <= 0 || o.resync <= 0 || o.gangHold <= 0 || o.moveCooldown <= 0 {
		return errors.New("-plan-interval, -max-staleness, -usage-period, -resync-interval, -gang-partial-hold and -move-cooldown must be positive durations such as 10s")
	}
	if o.cycleGap < 10*time.Millisecond || o.cycleGap > 10*time.Second {
		return fmt.Errorf("-cycle-gap %s: give the least time between two cycles, from 10ms to 10s, such as 75ms", o.cycleGap)
	}
	if o.maxMoves < 0 || o.maxMoves > 1000 {
		return fmt.Errorf("-max-moves %d: give how many movable jobs a cycle may move, 0 to 1000 (0: none)", o.maxMoves)
	}
	if o.fairHalfLife < 0 || !(o.fairUsageWeight > 0) || math.IsInf(o.fairUsageWeight, 0) {
		return fmt.Errorf("-fair-share-half-life %s and -fair-share-usage-weight %v: want a duration from 0s (off) and a weight above 0, such as 24h and 1", o.fairHalfLife, o.fairUsageWeight)
	}
	if err := checkLoopback(o.pprofListen); err != nil {
		return fmt.Errorf("-pprof-listen %q: %w", o.pprofListen, err)
	}
	if o.usagePort < 0 || o.usagePort > 65535 {
		return fmt.Errorf("-usage-port %d: give the device plugins' usage_listen port (1-65535), or 0 to read no GPU usage", o.usagePort)
	}
	if _, err := plan.PolicyByName(o.policy, 1, &cluster.Snapshot{}); err != nil {
		return fmt.Errorf("-policy %q: %w", o.policy, err)
	}
	if o.maxRecordBytes < 16<<10 {
		return fmt.Errorf("-max-record-bytes %d is below 16384: records hold the suspended job's spec; use Consul's kv_max_value_size (524288 by default)", o.maxRecordBytes)
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return errors.New("-tls-cert and -tls-key (GPUSHARE_TLS_CERT, GPUSHARE_TLS_KEY) go together: set both to serve HTTPS, or neither")
	}
	return nil
}

// recordKeys is where the record keys live: the key file, else the Nomad
// Variable.
func (o *options) recordKeys(nomad *nomadapi.Client) recordkey.Source {
	if o.recordKeyFile != "" {
		return &recordkey.File{Path: o.recordKeyFile}
	}
	return &recordkey.Variable{Client: nomad, Namespace: o.recordKeyNamespace, Path: o.recordKeyVar}
}

// refuseTokenFlags explains why the token flags are gone.
func refuseTokenFlags(args []string) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if fix, ok := removedFlags[name]; ok && strings.HasPrefix(a, "-") {
			return fmt.Errorf("-%s: tokens are not taken on the command line, where every user of the host can read them (ps); %s", name, fix)
		}
	}
	return nil
}

// intEnv reads an integer from the environment variable name, or returns
// def when it is unset.
func intEnv(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return def, fmt.Errorf("%s=%q is not an integer", name, v)
	}
	return n, nil
}

// floatEnv reads a number from the environment variable name, or def.
func floatEnv(name string, def float64) (float64, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return def, fmt.Errorf("%s=%q is not a number", name, v)
	}
	return f, nil
}

// boolEnv reads a boolean from the environment variable name, or def.
func boolEnv(name string, def bool) (bool, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return def, fmt.Errorf("%s=%q is not a boolean: use true or false", name, v)
	}
	return b, nil
}

// durationEnv reads a duration from the environment variable name, or
// returns def when it is unset.
func durationEnv(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return def, fmt.Errorf("%s=%q is not a duration: use a value such as 10s or 1m30s", name, v)
	}
	return d, nil
}
