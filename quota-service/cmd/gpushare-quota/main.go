// Command gpushare-quota is the gpushare quota service daemon: guaranteed
// GPU quotas per project for Nomad, with automatic suspension and
// resumption of jobs. Run two instances for availability; a Consul lock
// makes one of them act.
//
// Every flag has an environment variable; flags win.
//
//	-nomad-addr      NOMAD_ADDR          Nomad HTTP address (http://127.0.0.1:4646)
//	-nomad-token     NOMAD_TOKEN         Nomad ACL token
//	-consul-addr     CONSUL_HTTP_ADDR    Consul HTTP address (127.0.0.1:8500)
//	-consul-token    CONSUL_HTTP_TOKEN   Consul ACL token
//	-kv-prefix       GPUSHARE_KV_PREFIX  root of the service's Consul keys (gpushare)
//	-listen          GPUSHARE_LISTEN     HTTP API address (127.0.0.1:9646)
//	-plan-interval   GPUSHARE_PLAN_INTERVAL  safety-net re-list period (10s)
//	-max-staleness   GPUSHARE_MAX_STALENESS  no action on older data (15s)
//	-policy          GPUSHARE_POLICY     placement policy for idle capacity (gpushare)
//	-instance        GPUSHARE_INSTANCE   name of this instance (hostname-pid)
//	-log-level       GPUSHARE_LOG_LEVEL  trace, debug, info, warn, error (info)
//	-usage-port      GPUSHARE_USAGE_PORT the device plugins' usage_listen port; 0 reads no GPU usage (0)
//	-usage-period    GPUSHARE_USAGE_PERIOD  how often the GPU nodes' usage is read (15s)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/actuator"
	"github.com/gpushare/nomad-gpushare/quota-service/httpapi"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/utilization"
	"github.com/gpushare/nomad-gpushare/scheduler/model"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gpushare-quota:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	host, _ := os.Hostname()
	fs := flag.NewFlagSet("gpushare-quota", flag.ContinueOnError)
	nomadAddr := fs.String("nomad-addr", env("NOMAD_ADDR", "http://127.0.0.1:4646"), "Nomad HTTP address")
	nomadToken := fs.String("nomad-token", env("NOMAD_TOKEN", ""), "Nomad ACL token")
	consulAddr := fs.String("consul-addr", env("CONSUL_HTTP_ADDR", "127.0.0.1:8500"), "Consul HTTP address")
	consulToken := fs.String("consul-token", env("CONSUL_HTTP_TOKEN", ""), "Consul ACL token")
	prefix := fs.String("kv-prefix", env("GPUSHARE_KV_PREFIX", kvlayout.DefaultRoot), "root of the service's Consul KV keys")
	listen := fs.String("listen", env("GPUSHARE_LISTEN", "127.0.0.1:9646"), "HTTP API listen address")
	var envErrs []error
	durEnv := func(name string, def time.Duration) time.Duration {
		d, err := durationEnv(name, def)
		envErrs = append(envErrs, err)
		return d
	}
	interval := fs.Duration("plan-interval", durEnv("GPUSHARE_PLAN_INTERVAL", service.DefaultPlanInterval), "safety-net full re-list and plan period")
	staleness := fs.Duration("max-staleness", durEnv("GPUSHARE_MAX_STALENESS", actuator.DefaultMaxStaleness), "take no action on data listed longer ago")
	policyName := fs.String("policy", env("GPUSHARE_POLICY", "gpushare"), "placement policy for idle capacity")
	instance := fs.String("instance", env("GPUSHARE_INSTANCE", fmt.Sprintf("%s-%d", host, os.Getpid())), "name of this instance")
	level := fs.String("log-level", env("GPUSHARE_LOG_LEVEL", "info"), "log level")
	usagePort := fs.Int("usage-port", intEnv("GPUSHARE_USAGE_PORT", 0, &envErrs), "the device plugins' usage_listen port (0: read no GPU usage)")
	usagePeriod := fs.Duration("usage-period", durEnv("GPUSHARE_USAGE_PERIOD", utilization.DefaultPeriod), "how often the GPU nodes' usage is read")
	if err := errors.Join(envErrs...); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "gpushare-quota", Level: hclog.LevelFromString(*level)})
	if *interval <= 0 || *staleness <= 0 || *usagePeriod <= 0 {
		return errors.New("-plan-interval, -max-staleness and -usage-period must be positive durations such as 10s")
	}
	if *usagePort < 0 || *usagePort > 65535 {
		return fmt.Errorf("-usage-port %d: give the device plugins' usage_listen port (1-65535), or 0 to read no GPU usage", *usagePort)
	}
	if _, err := plan.PolicyByName(*policyName, 1, &model.Snapshot{}); err != nil {
		return fmt.Errorf("-policy %q: %w", *policyName, err)
	}
	nomad, err := nomadapi.NewClient(&nomadapi.Config{Address: *nomadAddr, SecretID: *nomadToken})
	if err != nil {
		return fmt.Errorf("-nomad-addr %q: %w", *nomadAddr, err)
	}
	ccfg := consulapi.DefaultConfig()
	ccfg.Address, ccfg.Token = *consulAddr, *consulToken
	consul, err := consulapi.NewClient(ccfg)
	if err != nil {
		return fmt.Errorf("-consul-addr %q: %w", *consulAddr, err)
	}
	svc := service.New(service.Config{Nomad: nomad, Consul: consul, Layout: kvlayout.New(*prefix), Log: log,
		Instance: *instance, PlanInterval: *interval, MaxStaleness: *staleness, PolicyName: *policyName,
		Usage: service.UsageConfig{Port: *usagePort, Period: *usagePeriod}})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("-listen %q: %w", *listen, err)
	}
	srv := &http.Server{Handler: httpapi.Handler(svc, svc.Registry()), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP API stopped", "error", err)
			stop()
		}
	}()
	log.Info("started", "instance", *instance, "nomad", *nomadAddr, "consul", *consulAddr, "kv_prefix", *prefix, "listen", ln.Addr().String())
	runErr := svc.Run(ctx)
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	log.Info("stopped")
	return runErr
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

// intEnv reads an integer from the environment variable name, or returns
// def when it is unset; a malformed value is added to errs.
func intEnv(name string, def int, errs *[]error) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s=%q is not a number: give a port such as 9410", name, v))
		return def
	}
	return n
}
