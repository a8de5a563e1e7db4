package vocab

import "testing"

func TestParse(t *testing.T) {
	const u = "GPU-8f3a2c1e-0000-4000-8000-000000000001"
	tests := []struct {
		in      string
		want    ID
		wantErr bool
	}{
		{in: u, want: ID{UUID: u}},
		{in: u + "-s00", want: ID{UUID: u, Share: 0, Units: 1, IsShare: true}},
		{in: u + "-s07", want: ID{UUID: u, Share: 7, Units: 1, IsShare: true}},
		{in: u + "-s99", want: ID{UUID: u, Share: 99, Units: 1, IsShare: true}},
		{in: u + "-u25-s03", want: ID{UUID: u, Share: 3, Units: 25, IsShare: true}},
		{in: u + "-u50-s01", want: ID{UUID: u, Share: 1, Units: 50, IsShare: true}},
		{in: u + "-u30-s01", want: ID{UUID: u + "-u30", Share: 1, Units: 1, IsShare: true}}, // 100/30: not a valid width
		{in: u + "-u01-s01", want: ID{UUID: u + "-u01", Share: 1, Units: 1, IsShare: true}},
		{in: u + "-s7", want: ID{UUID: u + "-s7"}}, // one digit: not a share ID
		{in: "-s07", want: ID{UUID: "-s07"}},       // nothing before the suffix
		{in: "", wantErr: true},
		{in: "GPU 1", wantErr: true},
		{in: u + ",x", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Fatalf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestShareRoundTrip(t *testing.T) {
	const u = "GPU-abc"
	for k := 0; k < DefaultSharesPerGPU; k++ {
		id := Share(u, k)
		got, err := Parse(id)
		if err != nil || !got.IsShare || got.UUID != u || got.Share != k || got.String() != id {
			t.Fatalf("round trip of %q: got %+v, %v", id, got, err)
		}
	}
}

// TestShareOfRoundTrip: with every valid shares per GPU, the instances of
// one GPU parse back to their GPU, number and units, and add up to the
// whole GPU.
func TestShareOfRoundTrip(t *testing.T) {
	const u = "GPU-5b2e0c8a-1111-4000-8000-000000000001"
	for n := 1; n <= UnitsPerGPU; n++ {
		if !ValidSharesPerGPU(n) {
			continue
		}
		total := 0
		for k := 0; k < n; k++ {
			id := ShareOf(u, k, n)
			got, err := Parse(id)
			if err != nil || !got.IsShare || got.UUID != u || got.Share != k || got.String() != id {
				t.Fatalf("n=%d: round trip of %q: got %+v, %v", n, id, got, err)
			}
			total += got.Units
		}
		if total != UnitsPerGPU {
			t.Fatalf("n=%d: the instances add up to %d units, want %d", n, total, UnitsPerGPU)
		}
	}
	for _, n := range []int{0, 1, 3, 30, 99, 101, 200} {
		if ValidSharesPerGPU(n) {
			t.Errorf("ValidSharesPerGPU(%d) = true, want false", n)
		}
	}
}

func TestShortUUID(t *testing.T) {
	for in, want := range map[string]string{
		"GPU-8f3a2c1e-0000-4000": "8f3a2c1e",
		"MIG-12345678abc":        "12345678",
		"abc":                    "abc",
	} {
		if got := ShortUUID(in); got != want {
			t.Errorf("ShortUUID(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"GPU-1", "GPU-1-s05", "-s", "-s0", "x-s99", "", "\x00-s1a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := Parse(s)
		if err != nil {
			return
		}
		if id.String() != s {
			t.Fatalf("Parse(%q).String() = %q", s, id.String())
		}
		if id.IsShare && (id.Share < 0 || id.Share >= UnitsPerGPU) {
			t.Fatalf("share out of range: %+v", id)
		}
		_ = ShortUUID(s)
	})
}

// TestMIGShares: a MIG device counts as its compute slices over its GPU's,
// in shares, rounded down, so that the devices of one GPU never add up to
// more than the GPU.
func TestMIGShares(t *testing.T) {
	tests := []struct {
		profile   string
		gpuSlices int
		want      int
	}{
		{"1g.5gb", 7, 14},
		{"1g.10gb", 7, 14},
		{"2g.20gb", 7, 28},
		{"3g.40gb", 7, 42},
		{"4g.40gb", 7, 57},
		{"7g.80gb", 7, 100},
		{"1g.10gb+me", 7, 14},
		{"1c.3g.20gb", 7, 14}, // a compute instance of a 3-slice GPU instance
		{"2g.12gb", 4, 50},    // A30
		{"", 7, 0},
		{"gpu", 7, 0},
		{"1g.5gb", 0, 0},
		{"8g.80gb", 7, 0},
	}
	for _, tt := range tests {
		if got := MIGShares(MIGProfileSlices(tt.profile), tt.gpuSlices); got != tt.want {
			t.Errorf("MIGShares(%q on %d slices) = %d, want %d", tt.profile, tt.gpuSlices, got, tt.want)
		}
	}
	if sum := 7 * MIGShares(1, 7); sum > UnitsPerGPU {
		t.Errorf("seven 1-slice devices add up to %d shares", sum)
	}
}
