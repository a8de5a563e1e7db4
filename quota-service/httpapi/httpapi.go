// Package httpapi serves the quota service's HTTP API: JSON status at
// /v1/status, /v1/projects and /v1/health, Prometheus metrics at /metrics
// and a dashboard at / that redraws itself from /v1/status.
//
// With Nomad's ACLs on, /v1/status, /v1/projects and the dashboard need a
// Nomad token (the X-Nomad-Token header, "Authorization: Bearer", or the
// cookie the dashboard's login form at /login sets; never the URL), and a
// request sees only the namespaces its token can list jobs in (see
// NomadAccess). /v1/health and /metrics need none: Consul's health check
// and Prometheus carry no Nomad token. Health says only ok, leader and,
// for a token that sees everything, why not ok; metrics carry project
// names and GPU amounts, no job names.
package httpapi

import (
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"sort"

	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Source is what the API reports on.
type Source interface {
	Status() service.Status
	Health() service.Health
}

// UtilizationSource is a Source that also reports what the GPU nodes use
// (/v1/utilization and the dashboard's "Utilization vs allocation"); its
// Utilization is nil when the service reads no usage.
type UtilizationSource interface {
	Utilization() *service.Utilization
}

// Config configures the API.
type Config struct {
	Source   Source
	Registry *prometheus.Registry
	// Access decides what a request may see; nil lets every request see
	// everything (Nomad without ACLs, and tests).
	Access Authorizer
	Log    hclog.Logger
}

// Handler returns the API over src with metrics from reg and no access
// control: for Nomad clusters without ACLs, and tests.
func Handler(src Source, reg *prometheus.Registry) http.Handler {
	return New(Config{Source: src, Registry: reg})
}

//go:embed assets
var assets embed.FS

var (
	loginPage    = template.Must(template.ParseFS(assets, "assets/login.html"))
	dashboardJS  = asset("assets/dashboard.js", "text/javascript; charset=utf-8")
	dashboardCSS = asset("assets/dashboard.css", "text/css; charset=utf-8")
	dashboardDoc = asset("assets/dashboard.html", "text/html; charset=utf-8")
)

// api serves the routes.
type api struct {
	Config
}

// New returns the API's handler.
func New(cfg Config) http.Handler {
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	a := &api{Config: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", a.status)
	mux.HandleFunc("GET /v1/projects", a.projects)
	mux.HandleFunc("GET /v1/health", a.health)
	mux.HandleFunc("GET /v1/utilization", a.utilization)
	mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /{$}", a.dashboard)
	mux.HandleFunc("GET /dashboard.js", dashboardJS)
	mux.HandleFunc("GET /dashboard.css", dashboardCSS)
	mux.HandleFunc("GET /login", a.loginForm)
	mux.HandleFunc("POST /login", a.login)
	mux.HandleFunc("POST /logout", a.logout)
	return secureHeaders(mux)
}

// secureHeaders sets the headers every answer carries: no sniffing, no
// framing, scripts and styles from this service only, and no caching of
// what a token may see.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		// Not no-referrer: with it a browser posts forms with
		// "Origin: null", and the login could not tell its own form.
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// access resolves what r may see.
func (a *api) access(r *http.Request) (Access, error) {
	if a.Access == nil {
		return Access{All: true}, nil
	}
	acc, err := a.Access.Access(r.Context(), requestToken(r))
	if err != nil && accessStatus(err) == http.StatusServiceUnavailable {
		a.Log.Debug("cannot resolve a request's Nomad token", "error", err)
	}
	return acc, err
}

// statusResponse is /v1/status: the status a request may see and, with
// ACLs on, what its token reads.
type statusResponse struct {
	service.Status
	Access *accessView `json:"access,omitempty"`
}

// accessView tells a person with ACLs on what the token reads.
type accessView struct {
	All        bool     `json:"all"`
	Namespaces []string `json:"namespaces,omitempty"`
	Nodes      bool     `json:"nodes"`
	// Login: the token came from the dashboard's login cookie.
	Login bool `json:"login"`
}

func (a *api) status(w http.ResponseWriter, r *http.Request) {
	acc, err := a.access(r)
	if err != nil {
		writeError(w, accessStatus(err), err)
		return
	}
	resp := statusResponse{Status: visibleStatus(a.Source.Status(), acc)}
	if token := requestToken(r); token != "" && a.Access != nil {
		view := &accessView{All: acc.All, Nodes: acc.All || acc.Nodes}
		for ns := range acc.Namespaces {
			view.Namespaces = append(view.Namespaces, ns)
		}
		sort.Strings(view.Namespaces)
		if c, err := r.Cookie(tokenCookie); err == nil && c.Value == token {
			view.Login = true
		}
		resp.Access = view
	}
	writeJSON(w, http.StatusOK, resp)
}

func (a *api) projects(w http.ResponseWriter, r *http.Request) {
	acc, err := a.access(r)
	if err != nil {
		writeError(w, accessStatus(err), err)
		return
	}
	projects := visibleProjects(a.Source.Status().Projects, acc)
	if projects == nil {
		projects = []service.ProjectView{}
	}
	writeJSON(w, http.StatusOK, projects)
}

// utilization answers 404 when the service reads no GPU usage.
func (a *api) utilization(w http.ResponseWriter, r *http.Request) {
	acc, err := a.access(r)
	if err != nil {
		writeError(w, accessStatus(err), err)
		return
	}
	us, ok := a.Source.(UtilizationSource)
	var u *service.Utilization
	if ok {
		u = us.Utilization()
	}
	if u == nil {
		writeError(w, http.StatusNotFound, errors.New("the service reads no GPU usage: start it with -usage-port (the device plugins' usage_listen port)"))
		return
	}
	writeJSON(w, http.StatusOK, visibleUtilization(*u, a.Source.Status().Projects, acc))
}

// health needs no token: Consul's health check carries none. The reason
// a cycle failed may name any job, so only a token that sees everything
// reads it.
func (a *api) health(w http.ResponseWriter, r *http.Request) {
	h := a.Source.Health()
	code := http.StatusOK
	if !h.OK {
		code = http.StatusServiceUnavailable
		if acc, err := a.access(r); err != nil || !acc.All {
			h.Reason = hiddenError
		}
	}
	writeJSON(w, code, h)
}

// dashboard serves the page; with ACLs on, a request without a token the
// service accepts is sent to the login form.
func (a *api) dashboard(w http.ResponseWriter, r *http.Request) {
	if _, err := a.access(r); err != nil && accessStatus(err) != http.StatusServiceUnavailable {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	dashboardDoc(w, r)
}

func (a *api) loginForm(w http.ResponseWriter, r *http.Request) {
	if a.Access == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	renderLogin(w, http.StatusOK, "")
}

// login checks the token with Nomad and keeps it in a session cookie that
// scripts cannot read and other sites cannot send.
func (a *api) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "cross-site login refused", http.StatusForbidden)
		return
	}
	if a.Access == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	token := r.PostFormValue("token")
	if token == "" {
		renderLogin(w, http.StatusUnauthorized, "Enter a Nomad token.")
		return
	}
	if _, err := a.Access.Access(r.Context(), token); err != nil {
		code := accessStatus(err)
		if errors.Is(err, ErrTokenRequired) {
			code = http.StatusForbidden
		}
		renderLogin(w, code, err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: token, Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (a *api) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "cross-site logout refused", http.StatusForbidden)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// sameOrigin refuses form posts from other sites: a browser says where a
// request comes from in Sec-Fetch-Site, or else in Origin; a request with
// neither (curl) is let through.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin" || site == "none"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

func renderLogin(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = loginPage.Execute(w, struct{ Error string }{msg})
}

// asset serves one embedded file; it runs when the package loads, so a
// file missing from the embedding fails every test at once.
func asset(name, contentType string) http.HandlerFunc {
	data, err := assets.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(data)
	}
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, struct {
		Error string `json:"error"`
	}{err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
