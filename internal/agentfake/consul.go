package agentfake

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"

	consulapi "github.com/hashicorp/consul/api"
)

// Consul is an in-memory Consul KV (get, list, keys, put, delete with and
// without check-and-set, and transactions of check-and-set writes).
type Consul struct {
	srv *httptest.Server

	mu    sync.Mutex
	index uint64
	kv    map[string]*consulapi.KVPair
}

// NewConsul starts a fake Consul; Close stops it.
func NewConsul() *Consul {
	c := &Consul{kv: map[string]*consulapi.KVPair{}, index: 10}
	c.srv = httptest.NewServer(http.HandlerFunc(c.serve))
	return c
}

// Close stops the server.
func (c *Consul) Close() { c.srv.Close() }

// Client returns an API client of the fake.
func (c *Consul) Client() *consulapi.Client {
	cl, err := consulapi.NewClient(&consulapi.Config{Address: strings.TrimPrefix(c.srv.URL, "http://")})
	if err != nil {
		panic(err) // only a malformed address fails
	}
	return cl
}

// Value returns the value at key (nil when absent).
func (c *Consul) Value(key string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.kv[key]; p != nil {
		return append([]byte(nil), p.Value...)
	}
	return nil
}

// Set writes key as a person would; nil deletes it.
func (c *Consul) Set(key string, value []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if value == nil {
		delete(c.kv, key)
		return
	}
	c.put(key, value)
}

// Lock writes key as held by session with value, as Consul's lock does
// (session "" leaves it unheld).
func (c *Consul) Lock(key string, value []byte, session string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.put(key, value).Session = session
}

// put writes key (c.mu held).
func (c *Consul) put(key string, value []byte) *consulapi.KVPair {
	c.index++
	p := c.kv[key]
	if p == nil {
		p = &consulapi.KVPair{Key: key, CreateIndex: c.index}
		c.kv[key] = p
	}
	p.Value, p.ModifyIndex = append([]byte(nil), value...), c.index
	return p
}

// cas says whether a write checked against index may go ahead (c.mu held).
func (c *Consul) cas(key string, index uint64) bool {
	p := c.kv[key]
	if index == 0 {
		return p == nil
	}
	return p != nil && p.ModifyIndex == index
}

func (c *Consul) serve(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case r.URL.Path == "/v1/txn" && r.Method == http.MethodPut:
		c.serveTxn(w, r)
	case strings.HasPrefix(r.URL.Path, "/v1/kv/"):
		c.serveKV(w, r, strings.TrimPrefix(r.URL.Path, "/v1/kv/"))
	default:
		http.Error(w, "the fake Consul does not serve "+r.URL.Path, http.StatusNotImplemented)
	}
}

func (c *Consul) serveKV(w http.ResponseWriter, r *http.Request, key string) {
	q := r.URL.Query()
	switch r.Method {
	case http.MethodGet:
		c.serveRead(w, key, q.Has("recurse"), q.Has("keys"))
	case http.MethodPut:
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		if q.Has("cas") {
			idx, _ := strconv.ParseUint(q.Get("cas"), 10, 64)
			if !c.cas(key, idx) {
				c.reply(w, false)
				return
			}
		}
		c.put(key, body)
		c.reply(w, true)
	case http.MethodDelete:
		if q.Has("cas") {
			idx, _ := strconv.ParseUint(q.Get("cas"), 10, 64)
			if !c.cas(key, idx) {
				c.reply(w, false)
				return
			}
		}
		if q.Has("recurse") {
			for k := range c.kv {
				if strings.HasPrefix(k, key) {
					delete(c.kv, k)
				}
			}
		} else {
			delete(c.kv, key)
		}
		c.index++
		c.reply(w, true)
	}
}

func (c *Consul) serveRead(w http.ResponseWriter, key string, recurse, keysOnly bool) {
	var pairs []*consulapi.KVPair
	for k, p := range c.kv {
		if k == key || ((recurse || keysOnly) && strings.HasPrefix(k, key)) {
			pairs = append(pairs, p)
		}
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i].Key < pairs[j].Key })
	w.Header().Set("X-Consul-Index", strconv.FormatUint(c.index, 10))
	if len(pairs) == 0 {
		http.Error(w, "", http.StatusNotFound)
		return
	}
	if keysOnly {
		keys := make([]string, len(pairs))
		for i, p := range pairs {
			keys[i] = p.Key
		}
		_ = json.NewEncoder(w).Encode(keys)
		return
	}
	_ = json.NewEncoder(w).Encode(pairs)
}

func (c *Consul) reply(w http.ResponseWriter, v any) {
	w.Header().Set("X-Consul-Index", strconv.FormatUint(c.index, 10))
	_ = json.NewEncoder(w).Encode(v)
}

// serveTxn applies a transaction of KV writes (set, cas, delete-cas) all
// or none.
func (c *Consul) serveTxn(w http.ResponseWriter, r *http.Request) {
	var ops []struct{ KV *consulapi.KVTxnOp }
	if err := json.NewDecoder(r.Body).Decode(&ops); err != nil {
		http.Error(w, "bad transaction", http.StatusBadRequest)
		return
	}
	for i, op := range ops {
		if op.KV == nil || (op.KV.Verb != consulapi.KVCAS && op.KV.Verb != consulapi.KVSet && op.KV.Verb != consulapi.KVDeleteCAS) {
			http.Error(w, "the fake Consul takes cas, set and delete-cas in transactions", http.StatusNotImplemented)
			return
		}
		if op.KV.Verb != consulapi.KVSet && !c.cas(op.KV.Key, op.KV.Index) {
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(consulapi.TxnResponse{Errors: consulapi.TxnErrors{{OpIndex: i, What: "failed to set key: index is stale"}}})
			return
		}
	}
	resp := consulapi.TxnResponse{}
	for _, op := range ops {
		if op.KV.Verb == consulapi.KVDeleteCAS {
			// Consul returns no result for a delete.
			delete(c.kv, op.KV.Key)
			c.index++
			continue
		}
		p := c.put(op.KV.Key, op.KV.Value)
		resp.Results = append(resp.Results, &consulapi.TxnResult{KV: &consulapi.KVPair{Key: p.Key, ModifyIndex: p.ModifyIndex, CreateIndex: p.CreateIndex}})
	}
	c.reply(w, resp)
}
