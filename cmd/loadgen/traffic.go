package main

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
)

// TrafficConfig shapes the bodies of POST /v1/check that Traffic writes.
type TrafficConfig struct {
	Mix Mix
	// Keys is the number of distinct normal clients; client n has the IPv4
	// address IPBase+n.
	Keys   int
	IPBase uint32
	// Sequential walks the normal keys in order (every key is touched once
	// per Keys normal requests) instead of drawing them at random.
	Sequential bool
	// Users is the fraction of normal keys that send a user id (and a tier).
	Users float64
	// Endpoint, when set, replaces the normal profile's endpoints.
	Endpoint string
	// Burst is the length of a bursty IP's run of requests.
	Burst int
	// Attackers is the number of IPs of each attacker profile.
	Attackers int
}

// Runs of the other attacker profiles: each IP sends this many requests of
// its profile in a row before the next IP takes over, so that the detector
// sees one IP cross its thresholds (50 distinct endpoints in 10 s by
// default) whatever the number of attacker IPs.
const (
	scannerRun    = 200
	bruteforceRun = 200
)

// The attacker profiles use the documentation ranges of RFC 5737, never
// exempt and never mistaken for the normal pool.
var attackerNets = [numProfiles][3]byte{
	Bursty:     {198, 51, 100},
	Scanner:    {203, 0, 113},
	Bruteforce: {192, 0, 2},
}

// scannerPaths are what scanners probe first; scannerPrefixes start their
// random paths.
var scannerPaths = []string{
	"/wp-login.php", "/.env", "/.git/config", "/admin", "/api/admin/users", "/phpmyadmin/index.php",
	"/server-status", "/config.json", "/backup.zip", "/api/v1/debug/vars", "/actuator/env", "/xmlrpc.php",
	"/.aws/credentials", "/cgi-bin/test.cgi", "/api/admin/config", "/console",
}

var scannerPrefixes = []string{"/api/admin/", "/backup/", "/old/", "/api/internal/", "/"}

// Traffic writes request bodies for a Mix. The draws come from each
// worker's own generator; the runs and the sequential walk are shared
// counters, so that a burst or a key order spans all connections. Safe for
// concurrent use.
type Traffic struct {
	cfg      TrafficConfig
	picker   picker
	endpoint []byte // cfg.Endpoint as the inside of a JSON string
	userCut  uint64 // a key carries a user when its hash is below this
	seq      [numProfiles]atomic.Uint64
}

// NewTraffic prepares the generator; cfg must be valid (see validate in
// main.go).
func NewTraffic(cfg TrafficConfig) *Traffic {
	t := &Traffic{cfg: cfg, picker: newPicker(cfg.Mix), userCut: uint64(cfg.Users * (1 << 32))}
	if cfg.Endpoint != "" {
		quoted, _ := json.Marshal(cfg.Endpoint) // a string always marshals
		t.endpoint = quoted[1 : len(quoted)-1]
	}
	return t
}

// Next appends the JSON body of the next request to dst and returns it with
// the profile it belongs to. It does not allocate when dst has room.
func (t *Traffic) Next(rng *rand.Rand, dst []byte) ([]byte, Profile) {
	p := t.picker.only
	if !t.picker.one {
		p = t.picker.pick(rng.IntN(t.picker.total))
	}
	switch p {
	case Normal:
		return t.normal(rng, dst), p
	case Bursty:
		return t.bursty(rng, dst), p
	case Scanner:
		return t.scanner(rng, dst), p
	default:
		return t.bruteforce(dst), p
	}
}

func (t *Traffic) normal(rng *rand.Rand, dst []byte) []byte {
	var n uint64
	if t.cfg.Sequential {
		n = (t.seq[Normal].Add(1) - 1) % uint64(t.cfg.Keys)
	} else {
		n = uint64(rng.IntN(t.cfg.Keys))
	}
	dst = append(dst, `{"ip":"`...)
	dst = appendIPv4(dst, t.cfg.IPBase+uint32(n))
	dst = append(dst, `","endpoint":"`...)
	if t.endpoint != nil {
		dst = append(dst, t.endpoint...)
	} else {
		dst = appendNormalEndpoint(dst, rng.Uint32())
	}
	dst = append(dst, `","method":"GET"`...)
	// Whether a key has a user is a property of the key, not of the draw:
	// a Fibonacci hash spreads it over the pool.
	if uint64(uint32(n*2654435761)) < t.userCut {
		dst = append(dst, `,"user_id":"u-`...)
		dst = strconv.AppendUint(dst, n, 10)
		dst = append(dst, `","tier":"`...)
		if n%10 == 0 {
			dst = append(dst, `VIP"`...)
		} else {
			dst = append(dst, `BASIC"`...)
		}
	}
	return append(dst, '}')
}

// appendNormalEndpoint writes a realistic API path chosen by r: mostly book
// pages, some listings, authors, searches and reviews.
func appendNormalEndpoint(dst []byte, r uint32) []byte {
	id := uint64(r>>8)%5000 + 1
	switch r % 20 {
	case 12, 13, 14:
		return append(dst, "/api/books"...)
	case 15, 16, 17:
		return strconv.AppendUint(append(dst, "/api/authors/"...), id%500+1, 10)
	case 18:
		return strconv.AppendUint(append(dst, "/api/search?q=book"...), id, 10)
	case 19:
		return append(strconv.AppendUint(append(dst, "/api/books/"...), id, 10), "/reviews"...)
	default:
		return strconv.AppendUint(append(dst, "/api/books/"...), id, 10)
	}
}

func (t *Traffic) bursty(rng *rand.Rand, dst []byte) []byte {
	k := t.seq[Bursty].Add(1) - 1
	dst = append(dst, `{"ip":"`...)
	dst = t.attackerIP(dst, Bursty, k/uint64(t.cfg.Burst))
	dst = append(dst, `","endpoint":"`...)
	dst = appendNormalEndpoint(dst, rng.Uint32())
	return append(dst, `","method":"GET"}`...)
}

func (t *Traffic) scanner(rng *rand.Rand, dst []byte) []byte {
	k := t.seq[Scanner].Add(1) - 1
	dst = append(dst, `{"ip":"`...)
	dst = t.attackerIP(dst, Scanner, k/scannerRun)
	dst = append(dst, `","endpoint":"`...)
	r := rng.Uint64()
	if k%4 == 0 { // the usual suspects, then random paths, which never repeat in practice
		dst = append(dst, scannerPaths[(k/4)%uint64(len(scannerPaths))]...)
	} else {
		dst = append(dst, scannerPrefixes[r%uint64(len(scannerPrefixes))]...)
		dst = strconv.AppendUint(dst, r>>8, 36)
		if r&0x80 != 0 {
			dst = append(dst, ".php"...)
		}
	}
	return append(dst, `","method":"GET"}`...)
}

func (t *Traffic) bruteforce(dst []byte) []byte {
	k := t.seq[Bruteforce].Add(1) - 1
	dst = append(dst, `{"ip":"`...)
	dst = t.attackerIP(dst, Bruteforce, k/bruteforceRun)
	dst = append(dst, `","endpoint":"/api/login","method":"POST","user_id":"user-`...)
	dst = strconv.AppendUint(dst, k, 10)
	return append(dst, `"}`...)
}

// attackerIP writes the address of the run-th run of profile p.
func (t *Traffic) attackerIP(dst []byte, p Profile, run uint64) []byte {
	n := attackerNets[p]
	return appendIPv4(dst, uint32(n[0])<<24|uint32(n[1])<<16|uint32(n[2])<<8|uint32(1+run%uint64(t.cfg.Attackers)))
}

// appendIPv4 writes ip in dotted-quad form.
func appendIPv4(dst []byte, ip uint32) []byte {
	dst = strconv.AppendUint(dst, uint64(ip>>24), 10)
	dst = append(dst, '.')
	dst = strconv.AppendUint(dst, uint64(ip>>16&0xff), 10)
	dst = append(dst, '.')
	dst = strconv.AppendUint(dst, uint64(ip>>8&0xff), 10)
	dst = append(dst, '.')
	return strconv.AppendUint(dst, uint64(ip&0xff), 10)
}
