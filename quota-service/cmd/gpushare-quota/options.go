package main

import (
	"errors"
	"flag"
	"fmt"
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
	"github.com/gpushare/nomad-gpushare/scheduler/model"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
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
	tlsCert, tlsKey                 string
	interval, staleness, resync     time.Duration
	policy, instance, logLevel      string
	// maxRecordBytes bounds a suspension record (it holds the job spec).
	maxRecordBytes int
	// usagePort is the device plugins' usage_listen port (0: read no GPU
	// usage); usagePeriod how often the GPU nodes are read.
	usagePort   int
	usagePeriod time.Duration
	// publishRanks: write the placement ranks as node metadata.
	publishRanks bool
	// recordKeyFile, else the Nomad Variable recordKeyVar in
	// recordKeyNamespace, holds the keys that sign suspension records.
	recordKeyFile, recordKeyVar, recordKeyNamespace string
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
	fs := flag.NewFlagSet("gpushare-quota", flag.ContinueOnError)
	fs.StringVar(&o.nomadAddr, "nomad-addr", "", "Nomad HTTP address (default NOMAD_ADDR, else http://127.0.0.1:4646)")
	fs.StringVar(&o.nomadTokenFile, "nomad-token-file", env("GPUSHARE_NOMAD_TOKEN_FILE", ""), "file holding the Nomad ACL token (default: NOMAD_TOKEN)")
	fs.StringVar(&o.consulAddr, "consul-addr", "", "Consul HTTP address (default CONSUL_HTTP_ADDR, else 127.0.0.1:8500)")
	fs.StringVar(&o.consulTokenFile, "consul-token-file", "", "file holding the Consul ACL token (default: CONSUL_HTTP_TOKEN_FILE, else CONSUL_HTTP_TOKEN)")
	prefix := fs.String("kv-prefix", env("GPUSHARE_KV_PREFIX", kvlayout.DefaultRoot), "root of the service's Consul KV keys")
	fs.StringVar(&o.listen, "listen", env("GPUSHARE_LISTEN", "127.0.0.1:9646"), "HTTP API listen address (the default answers this host only)")
	fs.StringVar(&o.tlsCert, "tls-cert", env("GPUSHARE_TLS_CERT", ""), "PEM certificate (chain) file: serve the API over HTTPS")
	fs.StringVar(&o.tlsKey, "tls-key", env("GPUSHARE_TLS_KEY", ""), "PEM private key file of -tls-cert")
	var envErrs []error
	durEnv := func(name string, def time.Duration) time.Duration {
		d, err := durationEnv(name, def)
		envErrs = append(envErrs, err)
		return d
	}
	fs.DurationVar(&o.interval, "plan-interval", durEnv("GPUSHARE_PLAN_INTERVAL", service.DefaultPlanInterval), "safety-net plan period (without the event stream: full re-list period)")
	fs.DurationVar(&o.resync, "resync-interval", durEnv("GPUSHARE_RESYNC_INTERVAL", nomadwatch.DefaultResyncInterval), "how often the view the event stream keeps is checked against a full listing of Nomad")
	fs.DurationVar(&o.staleness, "max-staleness", durEnv("GPUSHARE_MAX_STALENESS", actuator.DefaultMaxStaleness), "take no action on data listed longer ago")
	fs.StringVar(&o.policy, "policy", env("GPUSHARE_POLICY", "gpushare"), "placement policy for idle capacity")
	maxRecord, err := intEnv("GPUSHARE_MAX_RECORD_BYTES", state.DefaultMaxRecordBytes)
	envErrs = append(envErrs, err)
	fs.IntVar(&o.maxRecordBytes, "max-record-bytes", maxRecord, "largest suspension record written to Consul: a job whose spec would not fit is never suspended (keep it at or below Consul's kv_max_value_size)")
	usagePort, err := intEnv("GPUSHARE_USAGE_PORT", 0)
	envErrs = append(envErrs, err)
	fs.IntVar(&o.usagePort, "usage-port", usagePort, "the device plugins' usage_listen port (0: read no GPU usage)")
	fs.DurationVar(&o.usagePeriod, "usage-period", durEnv("GPUSHARE_USAGE_PERIOD", utilization.DefaultPeriod), "how often the GPU nodes' usage is read")
	publish, err := boolEnv("GPUSHARE_PUBLISH_RANKS", true)
	envErrs = append(envErrs, err)
	fs.BoolVar(&o.publishRanks, "publish-ranks", publish, "write placement ranks as Nomad dynamic node metadata gpushare.rank.<class> (the token needs node:write); GPU jobs with the ranking affinity then land where they fragment no GPU")
	fs.StringVar(&o.recordKeyFile, "record-key-file", env("GPUSHARE_RECORD_KEY_FILE", ""), "file holding the keys that sign suspension records (base64, current key first, then previous ones); default: the Nomad Variable -record-key-var")
	fs.StringVar(&o.recordKeyVar, "record-key-var", env("GPUSHARE_RECORD_KEY_VAR", service.DefaultRecordKeyPath), "Nomad Variable holding the record keys (items key and previous), created with a new key when absent")
	fs.StringVar(&o.recordKeyNamespace, "record-key-namespace", env("GPUSHARE_RECORD_KEY_NAMESPACE", "default"), "namespace of -record-key-var: one only operators may read")
	fs.StringVar(&o.instance, "instance", env("GPUSHARE_INSTANCE", fmt.Sprintf("%s-%d", host, os.Getpid())), "name of this instance")
	fs.StringVar(&o.logLevel, "log-level", env("GPUSHARE_LOG_LEVEL", "info"), "log level")
	if err := errors.Join(envErrs...); err != nil {
		return nil, err
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.layout = kvlayout.New(*prefix)
	return o, o.validate()
}

func (o *options) validate() error {
	if o.interval <= 0 || o.staleness <= 0 || o.usagePeriod <= 0 || o.resync <= 0 {
		return errors.New("-plan-interval, -max-staleness, -usage-period and -resync-interval must be positive durations such as 10s")
	}
	if o.usagePort < 0 || o.usagePort > 65535 {
		return fmt.Errorf("-usage-port %d: give the device plugins' usage_listen port (1-65535), or 0 to read no GPU usage", o.usagePort)
	}
	if _, err := plan.PolicyByName(o.policy, 1, &model.Snapshot{}); err != nil {
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
