package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"
)

// nomadProxy is a quota-service instance's way to Nomad: a reverse proxy
// that notes every job write the instance makes and Nomad accepts.
type nomadProxy struct {
	addr string
	srv  *http.Server
}

// startNomadProxy proxies to the Nomad agent at target for instance
// name, calling note for each accepted job write.
func startNomadProxy(name, target string, note func(write)) (*nomadProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("parsing the Nomad address %s: %w", target, err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // the event stream, blocking queries
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for %s's Nomad proxy: %w", name, err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := jobWrite(r.Method, r.URL.Path)
		if kind == "" {
			rp.ServeHTTP(w, r)
			return
		}
		what := kind + " " + jobOfRequest(r)
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		rp.ServeHTTP(sw, r)
		if sw.status/100 == 2 {
			note(write{by: name, what: what, start: start, end: time.Now()})
		}
	})
	p := &nomadProxy{addr: "http://" + l.Addr().String(), srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go p.srv.Serve(l)
	return p, nil
}

func (p *nomadProxy) close() { p.srv.Close() }

// jobOfRequest names the job a write is about: namespace/ID from the
// path, or from the body of a register to /v1/jobs (the body is put
// back for the proxy).
func jobOfRequest(r *http.Request) string {
	ns := r.URL.Query().Get("namespace")
	if ns == "" {
		ns = "default"
	}
	if id, ok := strings.CutPrefix(r.URL.Path, "/v1/job/"); ok {
		id, _, _ = strings.Cut(id, "/")
		return ns + "/" + id
	}
	if r.Body == nil {
		return ns + "/?"
	}
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Job struct{ ID, Namespace string }
	}
	if err != nil || json.Unmarshal(body, &req) != nil {
		return ns + "/?"
	}
	if req.Job.Namespace != "" {
		ns = req.Job.Namespace
	}
	return ns + "/" + req.Job.ID
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// watchLock reads the leader lock's key with consistent blocking queries
// until ctx ends, handing each read to note. A failed read (Consul down)
// leaves a gap: no tenure spans it.
func watchLock(ctx context.Context, consul *consulapi.Client, key string, note func(lockObs)) {
	var index uint64
	for ctx.Err() == nil {
		start := time.Now()
		q := (&consulapi.QueryOptions{RequireConsistent: true, WaitIndex: index, WaitTime: 2 * time.Second}).WithContext(ctx)
		pair, meta, err := consul.KV().Get(key, q)
		if err != nil {
			index = 0
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		o := lockObs{start: start, end: time.Now()}
		if pair != nil {
			o.session, o.createIndex, o.modifyIndex, o.lockIndex = pair.Session, pair.CreateIndex, pair.ModifyIndex, pair.LockIndex
			if pair.Session != "" {
				o.holder = string(pair.Value)
			}
		}
		note(o)
		index = meta.LastIndex
		if index < o.modifyIndex {
			index = 0 // Consul's index went back: start over
		}
	}
}
