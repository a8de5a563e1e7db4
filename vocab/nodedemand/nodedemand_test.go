package nodedemand

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestNodeRoundTripAndNonsense(t *testing.T) {
	n := Node{Epoch: "e", Requests: []Request{{Whole: 2}, {Shares: 25}, {Shares: 100}}}
	got, err := DecodeNode(n.Items())
	if err != nil || !reflect.DeepEqual(got, n) || !got.Same(n) || got.Whole() != 2 {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if e, err := DecodeNode(Node{Epoch: "e"}.Items()); err != nil || !e.Empty() {
		t.Fatalf("empty: %+v, %v", e, err)
	}
	for _, tt := range []struct {
		name  string
		items map[string]string
		want  string
	}{
		{"no epoch", map[string]string{"demand": "[]"}, "without an epoch"},
		{"not JSON", map[string]string{"epoch": "e", "demand": "whole=2"}, "node demand"},
		{"negative", map[string]string{"epoch": "e", "demand": `[{"whole":-1}]`}, "neither"},
		{"both families", map[string]string{"epoch": "e", "demand": `[{"whole":1,"shares":5}]`}, "neither"},
		{"more than a GPU of shares", map[string]string{"epoch": "e", "demand": `[{"shares":101}]`}, "neither"},
		{"absurd whole", map[string]string{"epoch": "e", "demand": `[{"whole":100000}]`}, "neither"},
		{"too many", map[string]string{"epoch": "e", "demand": "[" + strings.Repeat(`{"whole":1},`, MaxRequests) + `{"whole":1}]`}, "at most"},
	} {
		if _, err := DecodeNode(tt.items); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.want)
		}
	}
}

func TestLeaderRoundTripAndNonsense(t *testing.T) {
	l := Leader{Epoch: "e", Instance: "i", Beat: 15 * time.Second, Seq: 9}
	if got, err := DecodeLeader(l.Items()); err != nil || got != l {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, tt := range []struct {
		name  string
		items map[string]string
		want  string
	}{
		{"no epoch", map[string]string{"beat": "15s", "seq": "1"}, "without an epoch"},
		{"beat too short", map[string]string{"epoch": "e", "beat": "1ms", "seq": "1"}, "outside"},
		{"beat too long", map[string]string{"epoch": "e", "beat": "24h", "seq": "1"}, "outside"},
		{"beat not a duration", map[string]string{"epoch": "e", "beat": "often", "seq": "1"}, "heartbeat period"},
		{"no sequence", map[string]string{"epoch": "e", "beat": "15s"}, "sequence"},
	} {
		if _, err := DecodeLeader(tt.items); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.want)
		}
	}
}
