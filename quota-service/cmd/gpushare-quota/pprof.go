package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/hashicorp/go-hclog"
)

// checkLoopback accepts "" (no profiling endpoint) or a host:port whose
// host is a loopback address: the endpoint has no authentication, and a
// profile shows what the service holds in memory.
func checkLoopback(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port, such as 127.0.0.1:6060: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return errors.New("the profiling endpoint has no authentication: give a loopback address such as 127.0.0.1:6060")
	}
	return nil
}

// servePprof serves net/http/pprof's handlers on addr until the process
// ends; it returns once the listener is open.
func servePprof(addr string, log hclog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("-pprof-listen %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("profiling endpoint stopped", "error", err)
		}
	}()
	log.Info("profiling endpoint", "listen", ln.Addr().String())
	return nil
}
