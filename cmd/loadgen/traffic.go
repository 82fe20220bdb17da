package main

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
)

// TrafficConfig shapes the requests that Traffic draws.
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
	// Cost is what every request counts for; 0 leaves it out, to the
	// limiter's default of 1.
	Cost int
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

// Traffic draws the requests of a Mix. The draws come from each worker's
// own generator; the runs and the sequential walk are shared counters, so
// that a burst or a key order spans all connections. Safe for concurrent
// use.
type Traffic struct {
	cfg          TrafficConfig
	picker       picker
	endpoint     []byte // cfg.Endpoint
	endpointJSON []byte // cfg.Endpoint as the inside of a JSON string
	userCut      uint64 // a key carries a user when its hash is below this
	seq          [numProfiles]atomic.Uint64
}

// NewTraffic prepares the generator; cfg must be valid (see config.go).
func NewTraffic(cfg TrafficConfig) *Traffic {
	t := &Traffic{cfg: cfg, picker: newPicker(cfg.Mix), userCut: uint64(cfg.Users * (1 << 32))}
	if cfg.Endpoint != "" {
		t.endpoint = []byte(cfg.Endpoint)
		quoted, _ := json.Marshal(cfg.Endpoint) // a string always marshals
		t.endpointJSON = quoted[1 : len(quoted)-1]
	}
	return t
}

// Draw is one request of the traffic model, as either protocol sends it.
// Its slices are valid until the next draw into it, and are read-only:
// Endpoint may be shared by every draw.
type Draw struct {
	Profile  Profile
	IP       []byte // dotted quad
	Endpoint []byte
	Method   string
	UserID   []byte // empty: none
	Tier     string // empty: none
	// Cost is what the request counts for, 0 when it is the default (1):
	// JSON's "cost" and gRPC's hits_addend are then left out, as clients
	// leave them out.
	Cost int

	endpointJSON []byte // Endpoint as the inside of a JSON string; nil: Endpoint needs no escaping
	endpointBuf  []byte // the generated endpoints, never shared
}

// Next draws the next request into d, reusing its buffers: it does not
// allocate once they have grown.
func (t *Traffic) Next(rng *rand.Rand, d *Draw) {
	p := t.picker.only
	if !t.picker.one {
		p = t.picker.pick(rng.IntN(t.picker.total))
	}
	d.Profile = p
	d.Cost = t.cfg.Cost
	d.UserID = d.UserID[:0]
	d.Tier = ""
	d.Method = "GET"
	switch p {
	case Normal:
		t.normal(rng, d)
	case Bursty:
		t.bursty(rng, d)
	case Scanner:
		t.scanner(rng, d)
	default:
		t.bruteforce(d)
	}
}

// generated sets d's endpoint to ep, written in d's own buffer.
func (d *Draw) generated(ep []byte) {
	d.endpointBuf = ep
	d.Endpoint = ep
	d.endpointJSON = nil
}

func (t *Traffic) normal(rng *rand.Rand, d *Draw) {
	var n uint64
	if t.cfg.Sequential {
		n = (t.seq[Normal].Add(1) - 1) % uint64(t.cfg.Keys)
	} else {
		n = uint64(rng.IntN(t.cfg.Keys))
	}
	d.IP = appendIPv4(d.IP[:0], t.cfg.IPBase+uint32(n))
	if t.endpoint != nil {
		d.Endpoint, d.endpointJSON = t.endpoint, t.endpointJSON
	} else {
		d.generated(appendNormalEndpoint(d.endpointBuf[:0], rng.Uint32()))
	}
	// Whether a key has a user is a property of the key, not of the draw:
	// a Fibonacci hash spreads it over the pool.
	if uint64(uint32(n*2654435761)) < t.userCut {
		d.UserID = strconv.AppendUint(append(d.UserID, "u-"...), n, 10)
		if n%10 == 0 {
			d.Tier = "VIP"
		} else {
			d.Tier = "BASIC"
		}
	}
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

func (t *Traffic) bursty(rng *rand.Rand, d *Draw) {
	k := t.seq[Bursty].Add(1) - 1
	d.IP = t.attackerIP(d.IP[:0], Bursty, k/uint64(t.cfg.Burst))
	d.generated(appendNormalEndpoint(d.endpointBuf[:0], rng.Uint32()))
}

func (t *Traffic) scanner(rng *rand.Rand, d *Draw) {
	k := t.seq[Scanner].Add(1) - 1
	d.IP = t.attackerIP(d.IP[:0], Scanner, k/scannerRun)
	ep := d.endpointBuf[:0]
	r := rng.Uint64()
	if k%4 == 0 { // the usual suspects, then random paths, which never repeat in practice
		ep = append(ep, scannerPaths[(k/4)%uint64(len(scannerPaths))]...)
	} else {
		ep = append(ep, scannerPrefixes[r%uint64(len(scannerPrefixes))]...)
		ep = strconv.AppendUint(ep, r>>8, 36)
		if r&0x80 != 0 {
			ep = append(ep, ".php"...)
		}
	}
	d.generated(ep)
}

func (t *Traffic) bruteforce(d *Draw) {
	k := t.seq[Bruteforce].Add(1) - 1
	d.IP = t.attackerIP(d.IP[:0], Bruteforce, k/bruteforceRun)
	d.generated(append(d.endpointBuf[:0], "/api/login"...))
	d.Method = "POST"
	d.UserID = strconv.AppendUint(append(d.UserID, "user-"...), k, 10)
}

// AppendJSON appends d as the JSON body of POST /v1/check to dst; it does
// not allocate when dst has room. Every string but a -endpoint override is
// generated from characters JSON takes as they are.
func (d *Draw) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"ip":"`...)
	dst = append(dst, d.IP...)
	dst = append(dst, `","endpoint":"`...)
	dst = d.appendEndpointJSON(dst)
	dst = append(dst, `","method":"`...)
	dst = append(dst, d.Method...)
	dst = append(dst, '"')
	if len(d.UserID) > 0 {
		dst = append(dst, `,"user_id":"`...)
		dst = append(dst, d.UserID...)
		dst = append(dst, '"')
	}
	if d.Tier != "" {
		dst = append(dst, `,"tier":"`...)
		dst = append(dst, d.Tier...)
		dst = append(dst, '"')
	}
	if d.Cost != 0 {
		dst = append(dst, `,"cost":`...)
		dst = strconv.AppendInt(dst, int64(d.Cost), 10)
	}
	return append(dst, '}')
}

// appendEndpointJSON appends d's endpoint as the inside of a JSON string.
func (d *Draw) appendEndpointJSON(dst []byte) []byte {
	if d.endpointJSON != nil {
		return append(dst, d.endpointJSON...)
	}
	return append(dst, d.Endpoint...)
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
