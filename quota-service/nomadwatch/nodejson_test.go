package nomadwatch

import (
	"compress/gzip"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// stdlibNode is what encoding/json decodes data to (nil with its error).
func stdlibNode(data []byte) (*nomadapi.Node, error) {
	n := new(nomadapi.Node)
	if err := json.Unmarshal(data, n); err != nil {
		return nil, err
	}
	return n, nil
}

// TestDecodeNodeJSON: a node decodes to what encoding/json gives, the
// plugin's devices and their attributes included, whatever the case of
// its keys; what encoding/json refuses is refused.
func TestDecodeNodeJSON(t *testing.T) {
	full, err := json.Marshal(scaleNode(t))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		data    string
		wantErr bool
	}{
		{name: "scale node", data: string(full)},
		{name: "keys in another case", data: `{"id":"n1","NAME":"gpu-1","meta":{"a":"b"},"nodeResources":{"devices":[{"vendor":"nvidia","type":"gpu","instances":[{"id":"GPU-1","healthy":true}]}]}}`},
		{name: "unknown fields", data: `{"ID":"n1","Future":{"x":[1,2,3]},"Attributes":{"k":"v"}}`},
		{name: "null", data: `null`},
		{name: "wrong type", data: `{"ID":7}`, wantErr: true},
		{name: "truncated", data: string(full[:len(full)/2]), wantErr: true},
		{name: "not JSON", data: `<html>`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeNodeJSON([]byte(tt.data))
			want, wantErr := stdlibNode([]byte(tt.data))
			if (err != nil) != tt.wantErr || (wantErr != nil) != tt.wantErr {
				t.Fatalf("error %v (encoding/json: %v), want an error: %v", err, wantErr, tt.wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("decoded %+v, encoding/json decodes %+v", got, want)
			}
		})
	}
}

// FuzzDecodeNodeJSON: for any valid JSON, decodeNodeJSON gives what
// encoding/json gives (the node, or an error); for any input it does not
// panic.
func FuzzDecodeNodeJSON(f *testing.F) {
	// A small node: the fuzzer minimizes each input it finds, which a
	// scale node's 125 KB makes slow.
	node := scaleNode(f)
	for _, g := range node.NodeResources.Devices {
		g.Instances = g.Instances[:min(len(g.Instances), 2)]
	}
	node.NodeResources.Devices = node.NodeResources.Devices[:2]
	small, err := json.Marshal(node)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(small)
	f.Add([]byte(`{"id":"n1","Meta":{"a":"b"},"NodeResources":{"Devices":[{"Vendor":"nvidia","Attributes":{"m":{"Int":1,"Unit":"MiB"}}}]}}`))
	f.Add([]byte(`{"ID":"n1","ID":"n2","Drain":true,"ModifyIndex":18446744073709551615}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeNodeJSON(data)
		if !json.Valid(data) {
			return
		}
		want, wantErr := stdlibNode(data)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("error %v, encoding/json: %v", err, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded %+v, encoding/json decodes %+v", got, want)
		}
	})
}

// TestGetNodeReadsTheNode: a node read from Nomad's API (gzipped, as
// Nomad answers a client that accepts it) is the node Nomad sent; an
// error status is Nomad's error, with its status code.
func TestGetNodeReadsTheNode(t *testing.T) {
	node := scaleNode(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/node/node-1" {
			http.Error(w, "node not found", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			json.NewEncoder(w).Encode(node)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		json.NewEncoder(zw).Encode(node)
		zw.Close()
	}))
	defer srv.Close()
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder(client, hclog.NewNullLogger(), Options{})
	got, err := b.getNode(t.Context(), "node-1", true)
	if err != nil {
		t.Fatal(err)
	}
	if want := roundTrip(t, node); !reflect.DeepEqual(got, want) {
		t.Errorf("read %+v, want %+v", got, want)
	}
	if _, err := b.getNode(t.Context(), "node-2", true); StatusCode(err) != http.StatusNotFound || !strings.Contains(err.Error(), "node not found") {
		t.Errorf("reading an unknown node: %v, want Nomad's 404", err)
	}
}

// BenchmarkDecodeNodeJSON is one scale node (808 device instances) as
// Nomad's API answers it, decoded by decodeNodeJSON and by encoding/json.
func BenchmarkDecodeNodeJSON(b *testing.B) {
	data, err := json.Marshal(scaleNode(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decodeNodeJSON", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeNodeJSON(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := stdlibNode(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
