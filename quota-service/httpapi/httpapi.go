// Package httpapi serves the quota service's HTTP API: JSON status at
// /v1/status, /v1/projects and /v1/health, Prometheus metrics at /metrics
// and a small HTML dashboard at /.
package httpapi

import (
	"encoding/json"
	"html/template"
	"net/http"

	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Source is what the API reports on.
type Source interface {
	Status() service.Status
	Projects() []service.ProjectView
	Health() service.Health
}

// UtilizationSource is a Source that also reports what the GPU nodes use
// (/v1/utilization and the dashboard's "Utilization vs allocation"); its
// Utilization is nil when the service reads no usage.
type UtilizationSource interface {
	Utilization() *service.Utilization
}

// dashboardData is what the dashboard shows: the status, and the
// utilization when there is one.
type dashboardData struct {
	service.Status
	Utilization *service.Utilization
}

// Handler returns the API's handler; metrics come from reg.
func Handler(src Source, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, src.Status()) })
	mux.HandleFunc("GET /v1/projects", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, src.Projects()) })
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		h := src.Health()
		code := http.StatusOK
		if !h.OK {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, h)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	us, _ := src.(UtilizationSource)
	mux.HandleFunc("GET /v1/utilization", func(w http.ResponseWriter, r *http.Request) {
		if us == nil || us.Utilization() == nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "the service reads no GPU usage: start it with -usage-port (the device plugins' usage_listen port)"})
			return
		}
		writeJSON(w, http.StatusOK, us.Utilization())
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		data := dashboardData{Status: src.Status()}
		if us != nil {
			data.Utilization = us.Utilization()
		}
		if err := dashboard.Execute(w, data); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

var dashboard = template.Must(template.New("dashboard").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="5"><title>gpushare quotas</title>
<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}th{background:#eee}td:first-child{text-align:left}.err{color:#b00}</style></head>
<body><h1>gpushare quotas</h1>
<p>Instance {{.Instance}} ({{if .Leader}}leader{{else}}standby{{end}}); last cycle {{.LastCycle.Format "15:04:05"}}{{if .LastError}} <span class="err">{{.LastError}}</span>{{end}}</p>
<table><tr><th>project</th><th>guaranteed</th><th>limit</th><th>deserved</th><th>allocated</th><th>over quota</th><th>pending</th><th>suspended jobs</th><th>priority</th></tr>
{{range .Projects}}<tr><td>{{.Project}}{{if .QuotaError}} <span class="err" title="{{.QuotaError}}">(quota document rejected)</span>{{end}}</td><td>{{.Guaranteed}}</td><td>{{.Limit}}</td><td>{{.Deserved}}</td><td>{{.Allocated}}</td><td>{{.OverQuota}}</td><td>{{.Pending}}</td><td>{{.SuspendedJobs}}</td><td>{{.Priority}}</td></tr>
{{end}}</table>
{{with .Utilization}}<h2>Utilization vs allocation</h2>
<p>GPU nodes read {{.At.Format "15:04:05"}}: {{.Nodes}}{{if .Failed}}, <span class="err">{{len .Failed}} not answering</span>{{end}}{{if .Error}} <span class="err">{{.Error}}</span>{{end}}; processes of no tenant: {{.OutsideProcesses}} ({{.OutsideMiB}} MiB)</p>
<table><tr><th>project</th><th>guaranteed</th><th>allocated</th><th>used memory</th><th>used compute</th><th>idle</th><th>borrowed</th><th>tenants</th></tr>
{{range .Projects}}<tr><td>{{.Project}}</td><td>{{.Guaranteed}}</td><td>{{printf "%.2f" .Allocated}}</td><td>{{printf "%.2f" .UsedMemory}}</td><td>{{printf "%.2f" .UsedCompute}}</td><td>{{printf "%.2f" .Idle}}</td><td>{{printf "%.2f" .Borrowed}}</td><td>{{.Tenants}}</td></tr>
{{end}}</table>{{end}}
<h2>Suspended</h2><ul>{{range .Suspended}}<li>{{.}}</li>{{else}}<li>none</li>{{end}}</ul>
<h2>Waiting</h2><ul>{{range .Unplaced}}<li>{{.}}</li>{{else}}<li>none</li>{{end}}</ul>
{{if .Unplaceable}}<h2>Unplaceable</h2><ul>{{range .Unplaceable}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .OutOfPlanning}}<h2>Out of planning</h2><ul>{{range .OutOfPlanning}}<li>{{.}}</li>{{end}}</ul>{{end}}
<h2>Recent actions</h2><ul>{{range .Recent}}<li>{{.}}</li>{{else}}<li>none</li>{{end}}</ul>
</body></html>
`))
