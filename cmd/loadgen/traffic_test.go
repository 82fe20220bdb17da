package main

import (
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// body is a decoded request body, with unknown fields rejected as the
// limiter does.
type body struct {
	IP       string `json:"ip"`
	Endpoint string `json:"endpoint"`
	Method   string `json:"method"`
	UserID   string `json:"user_id"`
	Tier     string `json:"tier"`
	Cost     int    `json:"cost"`
}

func decodeBody(t *testing.T, b []byte) body {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var got body
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("body %s: %v", b, err)
	}
	if _, err := netip.ParseAddr(got.IP); err != nil || got.Endpoint == "" || !strings.HasPrefix(got.Endpoint, "/") {
		t.Fatalf("body %s: invalid ip or endpoint", b)
	}
	return got
}

// nextBody draws the next request of tr into d, reused as a worker reuses
// its own, and returns its JSON body.
func nextBody(tr *Traffic, rng *rand.Rand, d *Draw) ([]byte, Profile) {
	tr.Next(rng, d)
	return d.AppendJSON(nil), d.Profile
}

func testTraffic(mix Mix, mod func(*TrafficConfig)) *Traffic {
	cfg := TrafficConfig{Mix: mix, Keys: 1000, IPBase: 100<<24 | 64<<16, Users: 0.5, Burst: 50, Attackers: 8}
	if mod != nil {
		mod(&cfg)
	}
	return NewTraffic(cfg)
}

func TestTrafficBodies(t *testing.T) {
	tests := []struct {
		name  string
		mix   Mix
		mod   func(*TrafficConfig)
		check func(t *testing.T, bodies []body)
	}{
		{"normal keys stay in the pool", Mix{Normal: 1}, nil, func(t *testing.T, bodies []body) {
			users := 0
			for _, b := range bodies {
				a := netip.MustParseAddr(b.IP).As4()
				if a[0] != 100 || a[1] != 64 || int(a[2])<<8|int(a[3]) >= 1000 || b.Method != "GET" {
					t.Fatalf("normal request %+v outside 100.64.0.0 + 1000 keys, or not GET", b)
				}
				if b.UserID != "" {
					users++
					if b.Tier != "BASIC" && b.Tier != "VIP" {
						t.Fatalf("user without a tier: %+v", b)
					}
				}
			}
			if users < len(bodies)*4/10 || users > len(bodies)*6/10 {
				t.Fatalf("%d of %d normal requests carry a user, want about half", users, len(bodies))
			}
		}},
		{"endpoint override is escaped", Mix{Normal: 1}, func(c *TrafficConfig) { c.Endpoint = `/api/books/"17"` }, func(t *testing.T, bodies []body) {
			for _, b := range bodies {
				if b.Endpoint != `/api/books/"17"` {
					t.Fatalf("endpoint %q, want the override", b.Endpoint)
				}
			}
		}},
		{"endpoint override outlives the other profiles' draws", Mix{Normal: 2, Bursty: 1, Scanner: 1, Bruteforce: 1}, func(c *TrafficConfig) { c.Endpoint = "/fixed/17" }, func(t *testing.T, bodies []body) {
			normal := 0
			for _, b := range bodies {
				if isNormal := strings.HasPrefix(b.IP, "100.64."); isNormal != (b.Endpoint == "/fixed/17") {
					t.Fatalf("request %+v: only normal requests take the override", b)
				}
				if strings.HasPrefix(b.IP, "100.64.") {
					normal++
				}
			}
			if normal < 600 {
				t.Fatalf("%d normal requests of %d", normal, len(bodies))
			}
		}},
		{"cost on every request", Mix{1, 1, 1, 1}, func(c *TrafficConfig) { c.Cost = 3 }, func(t *testing.T, bodies []body) {
			for _, b := range bodies {
				if b.Cost != 3 {
					t.Fatalf("request %+v: cost %d, want 3", b, b.Cost)
				}
			}
		}},
		{"default cost left out", Mix{1, 1, 1, 1}, nil, func(t *testing.T, bodies []body) {
			for _, b := range bodies {
				if b.Cost != 0 {
					t.Fatalf("request %+v carries a cost", b)
				}
			}
		}},
		{"no users", Mix{Normal: 1}, func(c *TrafficConfig) { c.Users = 0 }, func(t *testing.T, bodies []body) {
			for _, b := range bodies {
				if b.UserID != "" || b.Tier != "" {
					t.Fatalf("user in %+v with -users 0", b)
				}
			}
		}},
		{"bursty runs of 50 per IP", Mix{Bursty: 1}, nil, func(t *testing.T, bodies []body) {
			for i, b := range bodies {
				want := "198.51.100." + strconv.Itoa(1+(i/50)%8)
				if b.IP != want {
					t.Fatalf("bursty request %d from %s, want %s", i, b.IP, want)
				}
			}
		}},
		{"scanner paths are distinct", Mix{Scanner: 1}, nil, func(t *testing.T, bodies []body) {
			perIP := map[string]map[string]bool{}
			for _, b := range bodies[:scannerRun] {
				if perIP[b.IP] == nil {
					perIP[b.IP] = map[string]bool{}
				}
				perIP[b.IP][b.Endpoint] = true
			}
			if len(perIP) != 1 || len(perIP["203.0.113.1"]) < 150 {
				t.Fatalf("first scanner run: %d IPs, %d distinct endpoints; want one IP with at least 150", len(perIP), len(perIP["203.0.113.1"]))
			}
		}},
		{"bruteforce posts to the login with new users", Mix{Bruteforce: 1}, nil, func(t *testing.T, bodies []body) {
			users := map[string]bool{}
			for _, b := range bodies {
				if b.Endpoint != "/api/login" || b.Method != "POST" || !strings.HasPrefix(b.IP, "192.0.2.") {
					t.Fatalf("bruteforce request %+v", b)
				}
				users[b.UserID] = true
			}
			if len(users) != len(bodies) {
				t.Fatalf("%d distinct users in %d requests", len(users), len(bodies))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := testTraffic(tt.mix, tt.mod)
			rng := rand.New(rand.NewPCG(1, 1))
			var bodies []body
			var d Draw
			for range 2000 {
				b, p := nextBody(tr, rng, &d)
				if tt.mix[p] == 0 {
					t.Fatalf("profile %s drawn, not in the mix %v", p, tt.mix)
				}
				bodies = append(bodies, decodeBody(t, b))
			}
			tt.check(t, bodies)
		})
	}
}

func TestTrafficSequentialTouchesEveryKey(t *testing.T) {
	tr := testTraffic(Mix{Normal: 1}, func(c *TrafficConfig) { c.Sequential = true; c.Keys = 3000 })
	rng := rand.New(rand.NewPCG(1, 1))
	seen := map[string]bool{}
	var d Draw
	for range 3000 {
		b, _ := nextBody(tr, rng, &d)
		seen[decodeBody(t, b).IP] = true
	}
	if len(seen) != 3000 {
		t.Fatalf("%d distinct IPs in 3000 sequential requests over 3000 keys", len(seen))
	}
}

func TestTrafficMixShares(t *testing.T) {
	tr := testTraffic(Mix{90, 8, 2, 0}, nil)
	rng := rand.New(rand.NewPCG(5, 5))
	var counts [numProfiles]int
	var d Draw
	for range 100000 {
		tr.Next(rng, &d)
		counts[d.Profile]++
	}
	if counts[Normal] < 89000 || counts[Normal] > 91000 || counts[Bursty] < 7500 || counts[Bursty] > 8500 ||
		counts[Scanner] < 1700 || counts[Scanner] > 2300 || counts[Bruteforce] != 0 {
		t.Fatalf("profile counts over 100000 draws = %v, want about 90000/8000/2000/0", counts)
	}
}

// TestTrafficDrawsWithoutAllocating: a worker's draw and body reuse their
// buffers, whatever the profile.
func TestTrafficDrawsWithoutAllocating(t *testing.T) {
	tr := testTraffic(Mix{1, 1, 1, 1}, nil)
	rng := rand.New(rand.NewPCG(1, 1))
	var d Draw
	buf := make([]byte, 0, 512)
	for range 1000 { // grow the buffers
		tr.Next(rng, &d)
		buf = d.AppendJSON(buf[:0])
	}
	if n := testing.AllocsPerRun(1000, func() {
		tr.Next(rng, &d)
		buf = d.AppendJSON(buf[:0])
	}); n != 0 {
		t.Fatalf("%v allocations per request", n)
	}
}

func TestAppendIPv4(t *testing.T) {
	tests := []struct {
		ip   uint32
		want string
	}{
		{0, "0.0.0.0"},
		{10<<24 | 1<<16 | 2<<8 | 3, "10.1.2.3"},
		{100<<24 | 64<<16 + 999_999, "100.79.66.63"},
		{0xffffffff, "255.255.255.255"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := string(appendIPv4(nil, tt.ip)); got != tt.want {
				t.Fatalf("appendIPv4(%#x) = %s, want %s", tt.ip, got, tt.want)
			}
		})
	}
}
