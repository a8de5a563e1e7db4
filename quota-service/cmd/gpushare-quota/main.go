// Command gpushare-quota is the gpushare quota service daemon: guaranteed
// GPU quotas per project for Nomad, with automatic suspension and
// resumption of jobs. Run two instances for availability; a Consul lock
// makes one of them act.
//
// Most flags have an environment variable; flags win. Their list, with
// the variables and defaults, is in docs/operator.md (Reference), rendered
// from the flag set (newFlags; reference_test.go fails when it drifts);
// `gpushare-quota -h` prints it too, and -version the version.
//
// Tokens come from the environment or from files, never from the command
// line, which every user of the host can read (ps). The Nomad and Consul
// clients honor their usual TLS variables: NOMAD_CACERT, NOMAD_CAPATH,
// NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY, NOMAD_TLS_SERVER_NAME,
// NOMAD_SKIP_VERIFY, and CONSUL_CACERT, CONSUL_CAPATH, CONSUL_CLIENT_CERT,
// CONSUL_CLIENT_KEY, CONSUL_TLS_SERVER_NAME, CONSUL_HTTP_SSL,
// CONSUL_HTTP_SSL_VERIFY (an https:// address turns TLS on too).
//
// With Nomad's ACLs on, the API's status and dashboard need a Nomad token
// and show only the namespaces it can read (package httpapi).
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
	"syscall"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/version"
	"github.com/gpushare/nomad-gpushare/quota-service/httpapi"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/hashicorp/go-hclog"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // -h printed the usage
		}
		fmt.Fprintln(os.Stderr, "gpushare-quota:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	opts, err := parseOptions(args)
	if err != nil {
		return err
	}
	if opts.version {
		fmt.Println(version.String("gpushare-quota"))
		return nil
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "gpushare-quota", Level: hclog.LevelFromString(opts.logLevel)})
	if opts.pprofListen != "" {
		if err := servePprof(opts.pprofListen, log); err != nil {
			return err
		}
	}
	nomad, err := newNomadClient(opts)
	if err != nil {
		return err
	}
	consul, consulAddr, err := newConsulClient(opts)
	if err != nil {
		return err
	}
	svc := service.New(service.Config{Nomad: nomad, Consul: consul, Layout: opts.layout, Log: log,
		Instance: opts.instance, PlanInterval: opts.interval, CycleGap: opts.cycleGap, ResyncInterval: opts.resync, MaxStaleness: opts.staleness, GangPartialHold: opts.gangHold,
		MaxMoves: maxMoves(opts.maxMoves), MoveCooldown: opts.moveCooldown,
		FairShareHalfLife: opts.fairHalfLife, FairShareUsageWeight: opts.fairUsageWeight, PolicyName: opts.policy, MaxRecordBytes: opts.maxRecordBytes,
		Usage: service.UsageConfig{Port: opts.usagePort, Period: opts.usagePeriod}, PublishRanks: opts.publishRanks, Demand: opts.demand,
		RecordKeys: opts.recordKeys(nomad)})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	handler := httpapi.New(httpapi.Config{Source: svc, Registry: svc.Registry(), Log: log.Named("http"),
		Access: httpapi.NewNomadAccess(nomad, 0)})
	srv, ln, err := listen(opts, handler)
	if err != nil {
		return err
	}
	go func() {
		serve := srv.Serve
		if srv.TLSConfig != nil {
			serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
		}
		if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP API stopped", "error", err)
			stop()
		}
	}()
	log.Info("started", "instance", opts.instance, "nomad", nomad.Address(), "consul", consulAddr, "kv_prefix", opts.layout.Root,
		"listen", ln.Addr().String(), "https", srv.TLSConfig != nil)
	runErr := svc.Run(ctx)
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	log.Info("stopped")
	return runErr
}

// listen opens the API's listener, with TLS when a certificate is
// configured.
func listen(opts *options, handler http.Handler) (*http.Server, net.Listener, error) {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", opts.listen)
	if err != nil {
		return nil, nil, fmt.Errorf("-listen %q: %w", opts.listen, err)
	}
	if opts.tlsCert != "" {
		cfg, err := serverTLS(opts.tlsCert, opts.tlsKey)
		if err != nil {
			ln.Close()
			return nil, nil, err
		}
		srv.TLSConfig = cfg
	}
	return srv, ln, nil
}

// maxMoves is the service's MaxMoves for the -max-moves flag, whose 0
// means none (the Config's 0 means the default).
func maxMoves(flag int) int {
	if flag == 0 {
		return -1
	}
	return flag
}
