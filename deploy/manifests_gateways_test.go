// Static checks of the Envoy rate limit filter recipe
// (deploy/gateways/envoy/ratelimit.yaml), its descriptor rules
// (deploy/gateways/envoy/rls, envoyproxy/ratelimit's format) and the compose
// service that runs it. Envoy is not run here: these hold the recipe to what
// would otherwise fail only at run time, or not fail at all (a descriptor no
// rule matches is simply never limited).

package deploy_test

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
)

const (
	manifestEnvoyRLSRecipe = "deploy/gateways/envoy/ratelimit.yaml"
	manifestEnvoyRLSDir    = "deploy/gateways/envoy/rls"

	manifestEnvoyHCMType      = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	manifestEnvoyRLSFilter    = "envoy.filters.http.ratelimit"
	manifestEnvoyRLSType      = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit"
	manifestEnvoyRouterFilter = "envoy.filters.http.router"
	manifestEnvoyHTTPOptions  = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

	// The limiter's defaults for its gRPC rate limit service: the listener,
	// and the descriptor entries it reads the client address and the
	// endpoint from (RLS_ADDRESS_KEY, RLS_ENDPOINT_KEY).
	manifestRLSDefaultListen = ":8083"
	manifestRLSAddressKey    = "remote_address"
	manifestRLSEndpointKey   = "path"
	// The entry that makes a stream-done descriptor the release of a
	// concurrency rule's hold (rules.ReleaseKey), and where Envoy keeps the
	// id the limiter answered (the filter's dynamic metadata namespace and
	// rlsapi.HoldMetadataKey).
	manifestRLSHoldKey       = "hold"
	manifestEnvoyRLSMetadata = "envoy.filters.http.ratelimit"
)

// --- envoyproxy/ratelimit configuration files ---

// manifestRLSFile is one YAML file of an RLS_CONFIG_DIR.
type manifestRLSFile struct {
	name string
	doc  map[string]any
}

// manifestReadRLSDir reads the *.yaml and *.yml files of dir, sorted.
func manifestReadRLSDir(dir string) ([]manifestRLSFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []manifestRLSFile
	for _, e := range entries {
		if e.IsDir() || (filepath.Ext(e.Name()) != ".yaml" && filepath.Ext(e.Name()) != ".yml") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		docs, err := manifestDecodeDocs(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		if len(docs) != 1 {
			return nil, fmt.Errorf("%s: %d YAML documents, want 1", e.Name(), len(docs))
		}
		files = append(files, manifestRLSFile{e.Name(), docs[0]})
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no YAML files", dir)
	}
	return files, nil
}

// manifestRLSProblems loads the files as the limiter does (package
// rlsconfig, RLS_CONFIG_DIR), so the recipe's rules are held to the real
// loader: each file re-encoded from what the test may have changed.
func manifestRLSProblems(files []manifestRLSFile) []string {
	in := make([]rlsconfig.File, len(files))
	for i, f := range files {
		data, err := yaml.Marshal(f.doc)
		if err != nil {
			return []string{f.name + ": " + err.Error()}
		}
		in[i] = rlsconfig.File{Name: f.name, Data: data}
	}
	if _, err := rlsconfig.Load(in); err != nil {
		return strings.Split(err.Error(), "\n")
	}
	return nil
}

// manifestRLSEntry is one (key, value) entry of a descriptor; value is ""
// when it is known only per request (an address, a header).
type manifestRLSEntry struct{ key, value string }

// manifestRLSRule is one path through a domain's descriptors to an entry
// with a rate_limit; value "" is "any value", a trailing * a prefix.
type manifestRLSRule []manifestRLSEntry

func (r manifestRLSRule) String() string {
	var parts []string
	for _, e := range r {
		if e.value == "" {
			parts = append(parts, e.key)
		} else {
			parts = append(parts, e.key+"="+e.value)
		}
	}
	return strings.Join(parts, " -> ")
}

// manifestRLSRules lists the rules of domain across the files.
func manifestRLSRules(files []manifestRLSFile, domain string) (rules []manifestRLSRule, found bool) {
	var walk func(level []any, prefix manifestRLSRule)
	walk = func(level []any, prefix manifestRLSRule) {
		for _, d := range level {
			r := append(slices.Clone(prefix), manifestRLSEntry{manifestStr(manifestAt(d, "key")), manifestStr(manifestAt(d, "value"))})
			if manifestAt(d, "rate_limit") != nil {
				rules = append(rules, r)
			}
			walk(manifestList(manifestAt(d, "descriptors")), r)
		}
	}
	for _, f := range files {
		if manifestStr(f.doc["domain"]) == domain {
			found = true
			walk(manifestList(f.doc["descriptors"]), nil)
		}
	}
	return rules, found
}

// manifestRLSHoldRules lists the rules of domain across the files whose
// request-time descriptor takes something that a stream-done descriptor
// naming the answered id ends: the concurrency rules (rate_limit.algorithm
// concurrency) with reserving false, and the rules that reserve
// (rate_limit.reserve) with reserving true.
func manifestRLSHoldRules(files []manifestRLSFile, domain string, reserving bool) []manifestRLSRule {
	var out []manifestRLSRule
	var walk func(level []any, prefix manifestRLSRule)
	walk = func(level []any, prefix manifestRLSRule) {
		for _, d := range level {
			r := append(slices.Clone(prefix), manifestRLSEntry{manifestStr(manifestAt(d, "key")), manifestStr(manifestAt(d, "value"))})
			concurrency := manifestStr(manifestAt(d, "rate_limit", "algorithm")) == "concurrency"
			reserves := manifestAt(d, "rate_limit", "reserve") != nil
			if (concurrency && !reserving) || (reserves && reserving) {
				out = append(out, r)
			}
			walk(manifestList(manifestAt(d, "descriptors")), r)
		}
	}
	for _, f := range files {
		if manifestStr(f.doc["domain"]) == domain {
			walk(manifestList(f.doc["descriptors"]), nil)
		}
	}
	return out
}

// manifestRLSMatches reports whether a descriptor with these entries can
// get the rule's limit: as many entries, the same keys, and where both fix a
// value, equal values (or the rule's wildcard prefix).
func manifestRLSMatches(rule manifestRLSRule, desc []manifestRLSEntry) bool {
	if len(rule) != len(desc) {
		return false
	}
	for i, e := range desc {
		r := rule[i]
		if r.key != e.key {
			return false
		}
		if r.value == "" || e.value == "" {
			continue
		}
		if prefix, wild := strings.CutSuffix(r.value, "*"); wild {
			if !strings.HasPrefix(e.value, prefix) {
				return false
			}
		} else if r.value != e.value {
			return false
		}
	}
	return true
}

// --- the Envoy recipe ---

// manifestEnvoyDescriptor is one descriptor a route's rate_limits entry
// produces.
type manifestEnvoyDescriptor struct {
	route   string
	entries []manifestRLSEntry
	// always: every action produces its entry on every request (none reads
	// a header that may be missing), so the descriptor is always sent.
	always bool
	// streamDone: sent when the stream is done (apply_on_stream_done).
	streamDone bool
	// holdAnswered: the last entry is the hold id the limiter answered (a
	// metadata action reading it from the filter's dynamic metadata).
	holdAnswered bool
	// hitsZero: hits_addend {number: 0}; hitsFormat: hits_addend read from
	// the request (a format), as the units a response used.
	hitsZero, hitsFormat bool
}

func (d manifestEnvoyDescriptor) String() string {
	return d.route + ": " + manifestRLSRule(d.entries).String()
}

// manifestEnvoyRLS is what the checks read from the recipe.
type manifestEnvoyRLS struct {
	domain        string
	token         string   // the bearer token in the gRPC call's metadata
	cluster       string   // the rate limit service's cluster
	listenerPorts []string // the listeners' ports
	// clusters: every cluster's endpoints, host:port.
	clusters map[string][]string
	// routed: the clusters the routes send requests to.
	routed      []string
	descriptors []manifestEnvoyDescriptor
}

var manifestBearer = regexp.MustCompile(`^Bearer (\S+)$`)

// manifestEnvoyActionEntry is the entry one rate limit action appends, and
// whether it appends it on every request. Descriptor keys the limiter reads
// as facts (the client address) must come from Envoy, never from a header.
func manifestEnvoyActionEntry(action any, where string, report func(string, ...any)) (e manifestRLSEntry, always, ok bool) {
	a := manifestMap(action)
	if len(a) != 1 {
		report("%s: an action names %d kinds, want one", where, len(a))
		return e, false, false
	}
	for kind, v := range a {
		switch kind {
		case "remote_address":
			return manifestRLSEntry{key: "remote_address"}, true, true
		case "generic_key":
			key := manifestStr(manifestAt(v, "descriptor_key"))
			if key == "" {
				key = "generic_key"
			}
			val := manifestStr(manifestAt(v, "descriptor_value"))
			if val == "" {
				report("%s: generic_key without descriptor_value", where)
			}
			return manifestRLSEntry{key, val}, true, true
		case "request_headers":
			header, key := manifestStr(manifestAt(v, "header_name")), manifestStr(manifestAt(v, "descriptor_key"))
			if header == "" || key == "" {
				report("%s: request_headers needs header_name and descriptor_key", where)
				return e, false, false
			}
			if key == manifestRLSAddressKey {
				report("%s: descriptor key %s from header %s: the client would choose the address the limiter limits and bans", where, key, header)
			}
			if key == manifestRLSEndpointKey && header != ":path" {
				report("%s: descriptor key %s from header %s, not :path: the client would choose the endpoint the limiter reports", where, key, header)
			}
			if manifestAt(v, "skip_if_absent") == true {
				report("%s: skip_if_absent: a missing header then shortens the descriptor instead of dropping it; not checked here", where)
			}
			// Pseudo-headers are on every request; another header may be
			// missing, and then the descriptor is not sent.
			return manifestRLSEntry{key: key}, strings.HasPrefix(header, ":"), true
		case "header_value_match":
			key := manifestStr(manifestAt(v, "descriptor_key"))
			if key == "" {
				key = "header_match"
			}
			return manifestRLSEntry{key, manifestStr(manifestAt(v, "descriptor_value"))}, false, true
		case "destination_cluster", "source_cluster":
			return manifestRLSEntry{key: kind}, true, true
		case "metadata":
			key := manifestStr(manifestAt(v, "descriptor_key"))
			if key == "" {
				report("%s: metadata without descriptor_key", where)
				return e, false, false
			}
			// Metadata may be missing: the descriptor is then not sent.
			return manifestRLSEntry{key: key}, false, true
		default:
			report("%s: action %s is not checked here", where, kind)
			return e, false, false
		}
	}
	return e, false, false
}

// manifestEnvoyReadsHold reports whether action is a metadata action that
// reads the hold id the limiter answered: the filter's dynamic metadata,
// key hold.
func manifestEnvoyReadsHold(action any) bool {
	m := manifestAt(action, "metadata")
	if m == nil {
		return false
	}
	path := manifestList(manifestAt(m, "metadata_key", "path"))
	return manifestStr(manifestAt(m, "source")) == "DYNAMIC" &&
		manifestStr(manifestAt(m, "metadata_key", "key")) == manifestEnvoyRLSMetadata &&
		len(path) == 1 && manifestStr(manifestAt(path[0], "key")) == manifestRLSHoldKey
}

// manifestEnvoyRoutesDescriptors collects the descriptors of every route of
// the route configuration (route-level rate_limits, or the virtual host's
// when a route has none) and the clusters the routes use.
func manifestEnvoyRoutesDescriptors(rc any, r *manifestEnvoyRLS, report func(string, ...any)) {
	for _, vh := range manifestList(manifestAt(rc, "virtual_hosts")) {
		for i, route := range manifestList(manifestAt(vh, "routes")) {
			name := fmt.Sprintf("virtual host %s, route %d", manifestStr(manifestAt(vh, "name")), i)
			if m := manifestMap(manifestAt(route, "match")); m != nil {
				for _, k := range []string{"path", "prefix", "path_separated_prefix"} {
					if v := manifestStr(m[k]); v != "" {
						name = fmt.Sprintf("route %s %s", k, v)
					}
				}
			}
			action := manifestMap(manifestAt(route, "route"))
			if action == nil {
				continue // direct_response, redirect: no upstream, no rate limit
			}
			if c := manifestStr(action["cluster"]); c != "" {
				r.routed = append(r.routed, c)
			}
			limits := manifestList(action["rate_limits"])
			if len(limits) == 0 {
				limits = manifestList(manifestAt(vh, "rate_limits"))
			}
			for j, rl := range limits {
				where := fmt.Sprintf("%s, rate_limits[%d]", name, j)
				d := manifestEnvoyDescriptor{route: name, always: true, streamDone: manifestAt(rl, "apply_on_stream_done") == true}
				if h := manifestMap(manifestAt(rl, "hits_addend")); h != nil {
					n, isNum := h["number"].(int)
					d.hitsZero = isNum && n == 0
					d.hitsFormat = manifestStr(h["format"]) != ""
				}
				actions := manifestList(manifestAt(rl, "actions"))
				if len(actions) == 0 {
					report("%s: no actions", where)
				}
				for _, a := range actions {
					e, always, ok := manifestEnvoyActionEntry(a, where, report)
					if !ok {
						d.entries = nil
						break
					}
					d.entries = append(d.entries, e)
					d.always = d.always && always
					d.holdAnswered = manifestEnvoyReadsHold(a)
				}
				if len(d.entries) > 0 {
					r.descriptors = append(r.descriptors, d)
				}
			}
		}
	}
}

// manifestParseEnvoyRLS reads the recipe: the HTTP connection manager with
// the ratelimit filter, its service's cluster, the routes' descriptors.
func manifestParseEnvoyRLS(recipe map[string]any) (manifestEnvoyRLS, []string) {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	r := manifestEnvoyRLS{clusters: map[string][]string{}}

	rawClusters := map[string]map[string]any{}
	for _, c := range manifestList(manifestAt(recipe, "static_resources", "clusters")) {
		name := manifestStr(manifestAt(c, "name"))
		rawClusters[name] = manifestMap(c)
		for _, e := range manifestList(manifestAt(c, "load_assignment", "endpoints")) {
			for _, lb := range manifestList(manifestAt(e, "lb_endpoints")) {
				sa := manifestAt(lb, "endpoint", "address", "socket_address")
				r.clusters[name] = append(r.clusters[name], manifestStr(manifestAt(sa, "address"))+":"+manifestStr(manifestAt(sa, "port_value")))
			}
		}
		if len(r.clusters[name]) == 0 {
			report("cluster %s: no endpoints", name)
		}
	}

	var filters int
	for _, l := range manifestList(manifestAt(recipe, "static_resources", "listeners")) {
		r.listenerPorts = append(r.listenerPorts, manifestStr(manifestAt(l, "address", "socket_address", "port_value")))
		for _, fc := range manifestList(manifestAt(l, "filter_chains")) {
			for _, nf := range manifestList(manifestAt(fc, "filters")) {
				hcm := manifestMap(manifestAt(nf, "typed_config"))
				if manifestStr(hcm["@type"]) != manifestEnvoyHCMType {
					continue
				}
				httpFilters := manifestList(hcm["http_filters"])
				var names []string
				for _, hf := range httpFilters {
					names = append(names, manifestStr(manifestAt(hf, "name")))
				}
				i := slices.Index(names, manifestEnvoyRLSFilter)
				if i < 0 {
					continue
				}
				filters++
				if len(names) == 0 || names[len(names)-1] != manifestEnvoyRouterFilter {
					report("http_filters %v: the router must come last", names)
				}
				// The remote_address entry is the trusted client address:
				// with use_remote_address false it is the right-most
				// X-Forwarded-For entry, which the client writes.
				if hcm["use_remote_address"] != true {
					report("use_remote_address is not true: the remote_address descriptor would be an address the client writes in X-Forwarded-For")
				}
				if n, ok := hcm["xff_num_trusted_hops"].(int); ok && n > 0 {
					report("xff_num_trusted_hops %d: with no proxy of yours in front, the client would write the address", n)
				}
				manifestEnvoyRoutesDescriptors(hcm["route_config"], &r, report)
				manifestEnvoyFilterProblems(manifestMap(manifestAt(httpFilters[i], "typed_config")), rawClusters, &r, report)
			}
		}
	}
	if filters != 1 {
		report("%d HTTP connection managers with the %s filter, want 1", filters, manifestEnvoyRLSFilter)
	}
	return r, problems
}

// manifestEnvoyFilterProblems checks the ratelimit filter's configuration
// and the cluster of its service.
func manifestEnvoyFilterProblems(tc map[string]any, clusters map[string]map[string]any, r *manifestEnvoyRLS, report func(string, ...any)) {
	if t := manifestStr(tc["@type"]); t != manifestEnvoyRLSType {
		report("%s: @type %q, want %s", manifestEnvoyRLSFilter, t, manifestEnvoyRLSType)
	}
	r.domain = manifestStr(tc["domain"])
	if r.domain == "" {
		report("%s: no domain", manifestEnvoyRLSFilter)
	}
	if d, err := time.ParseDuration(manifestStr(tc["timeout"])); err != nil || d <= 0 {
		report("%s: timeout %q: set one (the default, 20ms, turns a slow moment into errors)", manifestEnvoyRLSFilter, manifestStr(tc["timeout"]))
	}
	if _, ok := tc["failure_mode_deny"].(bool); !ok {
		report("%s: failure_mode_deny is not set: the recipe must say whether it fails open or closed", manifestEnvoyRLSFilter)
	}
	svc := manifestMap(tc["rate_limit_service"])
	if v := manifestStr(svc["transport_api_version"]); v != "V3" {
		report("%s: rate_limit_service.transport_api_version %q, want V3 (the limiter serves envoy.service.ratelimit.v3)", manifestEnvoyRLSFilter, v)
	}
	grpc := manifestMap(svc["grpc_service"])
	r.cluster = manifestStr(manifestAt(grpc, "envoy_grpc", "cluster_name"))
	r.token = manifestEnvoyBearer(manifestList(grpc["initial_metadata"]), func(m any) any { return m }, "rate_limit_service.grpc_service.initial_metadata", report)

	c, ok := clusters[r.cluster]
	if !ok {
		report("%s: rate_limit_service names cluster %q, which is not defined", manifestEnvoyRLSFilter, r.cluster)
		return
	}
	opts := manifestMap(manifestAt(c, "typed_extension_protocol_options", manifestEnvoyHTTPOptions))
	if _, h2 := manifestMap(manifestAt(opts, "explicit_http_config"))["http2_protocol_options"]; !h2 {
		report("cluster %s: no typed_extension_protocol_options %s explicit_http_config.http2_protocol_options: gRPC needs HTTP/2", r.cluster, manifestEnvoyHTTPOptions)
	}
	if t := manifestStr(opts["@type"]); t != "type.googleapis.com/"+manifestEnvoyHTTPOptions {
		report("cluster %s: protocol options @type %q", r.cluster, t)
	}
	for _, hc := range manifestList(c["health_checks"]) {
		if g := manifestAt(hc, "grpc_health_check"); g != nil {
			// HeaderValueOption here, HeaderValue in the gRPC service.
			tok := manifestEnvoyBearer(manifestList(manifestAt(g, "initial_metadata")), func(m any) any { return manifestAt(m, "header") },
				"cluster "+r.cluster+": grpc_health_check.initial_metadata", report)
			if tok != r.token {
				report("cluster %s: the health check sends token %q, the calls %q", r.cluster, tok, r.token)
			}
		}
	}
}

// manifestEnvoyBearer returns the token of the authorization entry of a
// gRPC metadata list.
func manifestEnvoyBearer(list []any, header func(any) any, where string, report func(string, ...any)) string {
	for _, e := range list {
		h := header(e)
		if manifestStr(manifestAt(h, "key")) != "authorization" {
			continue
		}
		if m := manifestBearer.FindStringSubmatch(manifestStr(manifestAt(h, "value"))); m != nil {
			return m[1]
		}
		report("%s: authorization is not \"Bearer <token>\"", where)
		return ""
	}
	report("%s: no authorization entry: a limiter with API_TOKENS refuses the calls", where)
	return ""
}

// manifestEnvoyRLSProblems checks the recipe against the rate limit rules:
// the filter's domain is a domain of the files; every descriptor a route
// sends can match a rule of it, and every rule is matched by a descriptor
// (a key misspelt on either side fails both ways); every route that asks
// the limiter sends the client's address in a descriptor sent on every
// request (how bans apply) and the path (the endpoint of the limiter's
// events).
func manifestEnvoyRLSProblems(r manifestEnvoyRLS, files []manifestRLSFile) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	rules, found := manifestRLSRules(files, r.domain)
	if !found {
		var domains []string
		for _, f := range files {
			domains = append(domains, manifestStr(f.doc["domain"]))
		}
		report("the filter's domain %q is none of the rule files' %v", r.domain, domains)
		return problems
	}
	holdRules, reserveRules := manifestRLSHoldRules(files, r.domain, false), manifestRLSHoldRules(files, r.domain, true)
	matchesAny := func(rs []manifestRLSRule, entries []manifestRLSEntry) bool {
		return slices.ContainsFunc(rs, func(rule manifestRLSRule) bool { return manifestRLSMatches(rule, entries) })
	}
	isHold := func(entries []manifestRLSEntry) bool {
		return matchesAny(holdRules, entries) || matchesAny(reserveRules, entries)
	}
	for _, d := range r.descriptors {
		if n := len(d.entries); n > 1 && d.entries[n-1].key == manifestRLSHoldKey && isHold(d.entries[:n-1]) {
			manifestEnvoyReleaseProblems(d, report)
			if matchesAny(reserveRules, d.entries[:n-1]) && !d.hitsFormat {
				report("%s: the settle of a reservation without hits_addend from the response (format): "+
					"it would settle every request at 1 unit, not at what it used", d)
			}
			continue
		}
		if !slices.ContainsFunc(rules, func(rule manifestRLSRule) bool { return manifestRLSMatches(rule, d.entries) }) {
			report("%s: no rule of domain %s matches this descriptor", d, r.domain)
		}
		if isHold(d.entries) {
			manifestEnvoyTakeProblems(d, r.descriptors, report)
		}
		if matchesAny(reserveRules, d.entries) && !d.streamDone && !d.hitsZero {
			report("%s: a request-time descriptor of a rule that reserves without hits_addend {number: 0}: "+
				"it debits its hits_addend and reserves nothing", d)
		}
	}
	for _, rule := range rules {
		if !slices.ContainsFunc(r.descriptors, func(d manifestEnvoyDescriptor) bool { return manifestRLSMatches(rule, d.entries) }) {
			report("domain %s: rule %s: no descriptor of the recipe matches it", r.domain, rule)
		}
	}
	routes := map[string][]manifestEnvoyDescriptor{}
	var names []string
	for _, d := range r.descriptors {
		if routes[d.route] == nil {
			names = append(names, d.route)
		}
		routes[d.route] = append(routes[d.route], d)
	}
	for _, name := range names {
		ds := routes[name]
		hasKey := func(key string, always bool) bool {
			return slices.ContainsFunc(ds, func(d manifestEnvoyDescriptor) bool {
				return (d.always || !always) && slices.ContainsFunc(d.entries, func(e manifestRLSEntry) bool { return e.key == key })
			})
		}
		if !hasKey(manifestRLSAddressKey, true) {
			report("%s: no descriptor sent on every request carries %s: a call without the others would name no client, and a ban would not apply", name, manifestRLSAddressKey)
		}
		if !hasKey(manifestRLSEndpointKey, false) {
			report("%s: no descriptor carries %s: the limiter's events would name no endpoint", name, manifestRLSEndpointKey)
		}
	}
	return problems
}

// manifestEnvoyReleaseProblems checks the release of a hold: sent when the
// stream is done (at request time it would free the slot before the
// request runs), its hold entry the id the limiter answered (a fixed value
// would let a request refused at request time, for which Envoy still sends
// the stream-done call, free another request's hold).
func manifestEnvoyReleaseProblems(d manifestEnvoyDescriptor, report func(string, ...any)) {
	if !d.streamDone {
		report("%s: a release of a hold without apply_on_stream_done: it frees the slot before the request runs", d)
	}
	if !d.holdAnswered {
		report("%s: the %s entry is not the id the limiter answered (metadata action, source DYNAMIC, %s, path [%s]): "+
			"a refused request's stream-done call would free another request's hold", d, manifestRLSHoldKey, manifestEnvoyRLSMetadata, manifestRLSHoldKey)
	}
}

// manifestEnvoyTakeProblems checks the take of a hold: at request time,
// with a release on the same route (the same entries and the hold entry).
func manifestEnvoyTakeProblems(d manifestEnvoyDescriptor, all []manifestEnvoyDescriptor, report func(string, ...any)) {
	if d.streamDone {
		report("%s: a hold taken when the stream is done is never released: each lapses after its lifetime", d)
		return
	}
	released := slices.ContainsFunc(all, func(o manifestEnvoyDescriptor) bool {
		n := len(o.entries)
		return o.route == d.route && n == len(d.entries)+1 && o.entries[n-1].key == manifestRLSHoldKey &&
			slices.Equal(o.entries[:n-1], d.entries)
	})
	if !released {
		report("%s: holds taken on this route are never released (no stream-done descriptor with the same entries and %s): each lapses after its lifetime", d, manifestRLSHoldKey)
	}
}

func manifestLoadEnvoyRLS(t testing.TB) (map[string]any, []manifestRLSFile) {
	t.Helper()
	docs := manifestReadDocs(t, filepath.Join(manifestRoot, manifestEnvoyRLSRecipe))
	if len(docs) != 1 {
		t.Fatalf("%s: %d YAML documents, want 1", manifestEnvoyRLSRecipe, len(docs))
	}
	files, err := manifestReadRLSDir(filepath.Join(manifestRoot, manifestEnvoyRLSDir))
	if err != nil {
		t.Fatal(err)
	}
	return docs[0], files
}

func manifestEnvoyRLSAllProblems(recipe map[string]any, files []manifestRLSFile) []string {
	r, problems := manifestParseEnvoyRLS(recipe)
	problems = append(problems, manifestRLSProblems(files)...)
	return append(problems, manifestEnvoyRLSProblems(r, files)...)
}

func TestManifestEnvoyRLSRecipe(t *testing.T) {
	recipe, files := manifestLoadEnvoyRLS(t)
	for _, p := range manifestEnvoyRLSAllProblems(recipe, files) {
		t.Error(p)
	}
}

// manifestFirstRLSFilter is the ratelimit filter's typed_config, for edits.
func manifestFirstRLSFilter(recipe map[string]any) map[string]any {
	for _, l := range manifestList(manifestAt(recipe, "static_resources", "listeners")) {
		for _, fc := range manifestList(manifestAt(l, "filter_chains")) {
			for _, nf := range manifestList(manifestAt(fc, "filters")) {
				for _, hf := range manifestList(manifestAt(nf, "typed_config", "http_filters")) {
					if manifestStr(manifestAt(hf, "name")) == manifestEnvoyRLSFilter {
						return manifestMap(manifestAt(hf, "typed_config"))
					}
				}
			}
		}
	}
	return nil
}

// --- the compose service running the recipe ---

// manifestComposeNames is the service's name and its network aliases.
func manifestComposeNames(s *manifestComposeService) []string {
	names := []string{s.name}
	for _, n := range manifestMap(s.raw["networks"]) {
		names = append(names, manifestStrings(manifestAt(n, "aliases"))...)
	}
	return names
}

// manifestComposeResolve returns the services a host name reaches.
func manifestComposeResolve(services map[string]*manifestComposeService, host string) []string {
	var out []string
	for name, s := range services {
		if slices.Contains(manifestComposeNames(s), host) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// manifestComposePublished returns the container ports the service
// publishes.
func manifestComposePublished(raw map[string]any) []string {
	var out []string
	for _, p := range manifestList(raw["ports"]) {
		if m := manifestMap(p); m != nil {
			out = append(out, manifestStr(m["target"]))
			continue
		}
		spec := manifestStr(p)
		spec, _, _ = strings.Cut(spec, "/")
		out = append(out, spec[strings.LastIndex(spec, ":")+1:])
	}
	return out
}

var (
	// The envoy service's command: sed writes the token into a copy of the
	// mounted recipe, and Envoy runs the copy.
	manifestEnvoySed = regexp.MustCompile(`sed\s+"s\|([^|]+)\|(\$+)(\w+)\|g"\s+(\S+)\s*>\s*(\S+)`)
	manifestEnvoyRun = regexp.MustCompile(`exec\s+envoy\s+-c\s+(\S+)`)
)

// manifestComposeEnvoyProblems checks the envoy service against the recipe
// it mounts and the limiters: the recipe is mounted where the command reads
// it, the token sed writes in is the recipe's placeholder and comes from
// GATEWAY_API_TOKEN; the rate limit cluster reaches every limiter and only
// them, on their GRPC_LISTEN_ADDR port; the limiters read the rules of the
// recipe's domain from RLS_CONFIG_DIR and send the RateLimit headers; the
// application cluster is the one nginx fronts; the listener is published.
func manifestComposeEnvoyProblems(services map[string]*manifestComposeService, limiters []*manifestComposeService, root string) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	var gw, nginx *manifestComposeService
	for _, s := range services {
		switch img := manifestStr(s.raw["image"]); {
		case strings.HasPrefix(img, "envoyproxy/envoy"):
			gw = s
		case strings.HasPrefix(img, "nginx"):
			nginx = s
		}
	}
	if gw == nil {
		return []string{"no envoy gateway service (image envoyproxy/envoy)"}
	}

	// The recipe, mounted as is; the command makes a copy with the token.
	var template string
	for src, dst := range manifestComposeMounts(gw.raw) {
		if filepath.ToSlash(filepath.Clean(src)) == manifestEnvoyRLSRecipe {
			template = dst
		}
	}
	if template == "" {
		return []string{fmt.Sprintf("%s: does not mount %s", gw.name, manifestEnvoyRLSRecipe)}
	}
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(manifestEnvoyRLSRecipe)))
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", gw.name, err)}
	}
	docs, err := manifestDecodeDocs(data)
	if err != nil || len(docs) != 1 {
		return []string{fmt.Sprintf("%s: %s: %d documents, %v", gw.name, manifestEnvoyRLSRecipe, len(docs), err)}
	}
	r, _ := manifestParseEnvoyRLS(docs[0]) // the recipe's own problems are TestManifestEnvoyRLSRecipe's

	command := strings.Join(manifestStrings(gw.raw["command"]), " ")
	sed, run := manifestEnvoySed.FindStringSubmatch(command), manifestEnvoyRun.FindStringSubmatch(command)
	switch {
	case sed == nil || run == nil:
		report("%s: the command does not sed the token into a copy of the recipe and run envoy -c on the copy", gw.name)
	case sed[4] != template:
		report("%s: sed reads %s, but the recipe is mounted at %s", gw.name, sed[4], template)
	case sed[5] != run[1]:
		report("%s: sed writes %s, envoy runs %s", gw.name, sed[5], run[1])
	case sed[1] != r.token:
		report("%s: sed replaces %q, but the recipe's token is %q", gw.name, sed[1], r.token)
	case sed[2] != "$$":
		report("%s: write $$%s: with one $ compose substitutes it from the host's environment", gw.name, sed[3])
	case !strings.Contains(gw.env[sed[3]], "GATEWAY_API_TOKEN"):
		report("%s: the command writes $%s, which its environment does not take from GATEWAY_API_TOKEN (%q)", gw.name, sed[3], gw.env[sed[3]])
	}

	// The listener is reachable from outside.
	published := manifestComposePublished(gw.raw)
	for _, p := range r.listenerPorts {
		if !slices.Contains(published, p) {
			report("%s: the recipe listens on %s, which is not published (%v)", gw.name, p, published)
		}
	}

	// The rate limit cluster: every limiter, on its gRPC port.
	var limiterNames []string
	for _, l := range limiters {
		limiterNames = append(limiterNames, l.name)
	}
	slices.Sort(limiterNames)
	var reached []string
	for _, ep := range r.clusters[r.cluster] {
		host, port, _ := strings.Cut(ep, ":")
		names := manifestComposeResolve(services, host)
		reached = append(reached, names...)
		for _, n := range names {
			s := services[n]
			addr := s.env["GRPC_LISTEN_ADDR"]
			if addr == "" {
				addr = manifestRLSDefaultListen
			}
			if want := manifestPort(addr); port != want {
				report("%s: cluster %s calls %s, but %s's GRPC_LISTEN_ADDR port is %s", gw.name, r.cluster, ep, n, want)
			}
		}
	}
	slices.Sort(reached)
	if reached = slices.Compact(reached); !slices.Equal(reached, limiterNames) {
		report("%s: cluster %s %v reaches %v, the limiters are %v (give them a common network alias)", gw.name, r.cluster, r.clusters[r.cluster], reached, limiterNames)
	}
	for _, l := range limiters {
		problems = append(problems, manifestComposeRLSDirProblems(l, r.domain, root)...)
		if l.env["LIMIT_RESPONSE_HEADERS_ENABLED"] != "true" {
			report("%s: LIMIT_RESPONSE_HEADERS_ENABLED is not true: Envoy's answers would carry no RateLimit headers", l.name)
		}
	}

	// The application: the service and port nginx fronts.
	fronted := map[string]bool{}
	if nginx != nil {
		for src, dst := range manifestComposeMounts(nginx.raw) {
			if strings.HasSuffix(dst, ".conf") || strings.HasSuffix(dst, ".conf.template") {
				conf, _ := os.ReadFile(filepath.Join(root, filepath.FromSlash(src)))
				for _, m := range manifestNginxServer.FindAllSubmatch(conf, -1) {
					for _, n := range manifestComposeResolve(services, string(m[1])) {
						fronted[n+":"+string(m[2])] = true
					}
				}
			}
		}
	}
	var apps int
	for _, c := range r.routed {
		if c == r.cluster {
			continue
		}
		for _, ep := range r.clusters[c] {
			apps++
			host, port, _ := strings.Cut(ep, ":")
			names := manifestComposeResolve(services, host)
			if len(names) == 0 {
				report("%s: cluster %s calls %s, which no service is named", gw.name, c, ep)
			}
			for _, n := range names {
				if services[n].binary != "" || !fronted[n+":"+port] {
					report("%s: cluster %s calls %s (%s), which is not the application nginx fronts", gw.name, c, ep, n)
				}
			}
		}
	}
	if apps == 0 {
		report("%s: no route sends requests to an application", gw.name)
	}
	return problems
}

// manifestComposeRLSDirProblems checks that the limiter reads a directory of
// rule files holding the recipe's domain.
func manifestComposeRLSDirProblems(l *manifestComposeService, domain, root string) []string {
	dir := l.env["RLS_CONFIG_DIR"]
	if !path.IsAbs(dir) {
		return []string{fmt.Sprintf("%s: RLS_CONFIG_DIR %q must be an absolute path in the container", l.name, dir)}
	}
	for src, dst := range manifestComposeMounts(l.raw) {
		if path.Clean(dst) != path.Clean(dir) {
			continue
		}
		files, err := manifestReadRLSDir(filepath.Join(root, filepath.FromSlash(src)))
		if err != nil {
			return []string{fmt.Sprintf("%s: RLS_CONFIG_DIR %s is mounted from %s: %v", l.name, dir, src, err)}
		}
		if _, found := manifestRLSRules(files, domain); !found {
			return []string{fmt.Sprintf("%s: RLS_CONFIG_DIR %s (%s) has no file for Envoy's domain %q", l.name, dir, src, domain)}
		}
		return nil
	}
	return []string{fmt.Sprintf("%s: nothing is mounted at RLS_CONFIG_DIR %s", l.name, dir)}
}

// The checks catch what they claim to: each edit below breaks the recipe,
// its rules or the compose service in one way.
func TestManifestEnvoyRLSCheckersCatchMistakes(t *testing.T) {
	cfg := manifestLoadConfig(t)
	cluster := func(recipe map[string]any, name string) map[string]any {
		for _, c := range manifestList(manifestAt(recipe, "static_resources", "clusters")) {
			if manifestStr(manifestAt(c, "name")) == name {
				return manifestMap(c)
			}
		}
		t.Fatalf("no cluster %s", name)
		return nil
	}
	route := func(recipe map[string]any, prefix string) map[string]any {
		for _, l := range manifestList(manifestAt(recipe, "static_resources", "listeners")) {
			for _, fc := range manifestList(manifestAt(l, "filter_chains")) {
				for _, nf := range manifestList(manifestAt(fc, "filters")) {
					for _, vh := range manifestList(manifestAt(nf, "typed_config", "route_config", "virtual_hosts")) {
						for _, r := range manifestList(manifestAt(vh, "routes")) {
							if manifestStr(manifestAt(r, "match", "prefix")) == prefix {
								return manifestMap(r)
							}
						}
					}
				}
			}
		}
		t.Fatalf("no route with prefix %s", prefix)
		return nil
	}
	hcm := func(recipe map[string]any) map[string]any {
		return manifestMap(manifestAt(manifestList(manifestAt(manifestList(manifestAt(manifestList(manifestAt(recipe, "static_resources", "listeners"))[0], "filter_chains"))[0], "filters"))[0], "typed_config"))
	}
	recipeWith := func(t *testing.T, edit func(recipe map[string]any, files []manifestRLSFile)) []string {
		t.Helper()
		recipe, files := manifestLoadEnvoyRLS(t)
		edit(recipe, files)
		return manifestEnvoyRLSAllProblems(recipe, files)
	}
	composeWith := func(t *testing.T, edit func(services map[string]any)) []string {
		t.Helper()
		compose := manifestLoadCompose(t)
		edit(manifestMap(compose["services"]))
		return manifestComposeProblems(compose, cfg, manifestRoot)
	}
	tests := []struct {
		name  string
		check func(t *testing.T) []string
		want  string
	}{
		{"recipe: rate limit cluster speaking HTTP/1.1", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) {
				delete(cluster(r, "ratewarden_rls"), "typed_extension_protocol_options")
			})
		}, "gRPC needs HTTP/2"},
		{"recipe: service names a missing cluster", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) {
				manifestMap(manifestAt(manifestFirstRLSFilter(r), "rate_limit_service", "grpc_service", "envoy_grpc"))["cluster_name"] = "ratewarden"
			})
		}, `names cluster "ratewarden"`},
		{"recipe: v2 transport", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) {
				manifestMap(manifestAt(manifestFirstRLSFilter(r), "rate_limit_service"))["transport_api_version"] = "V2"
			})
		}, "want V3"},
		{"recipe: domain of no rule file", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) { manifestFirstRLSFilter(r)["domain"] = "edge_proxy" })
		}, `domain "edge_proxy" is none`},
		{"recipe: no token on the calls", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) {
				delete(manifestMap(manifestAt(manifestFirstRLSFilter(r), "rate_limit_service", "grpc_service")), "initial_metadata")
			})
		}, "no authorization entry"},
		{"recipe: failure mode left implicit", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) { delete(manifestFirstRLSFilter(r), "failure_mode_deny") })
		}, "failure_mode_deny is not set"},
		{"recipe: address from X-Forwarded-For", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) { hcm(r)["use_remote_address"] = false })
		}, "use_remote_address is not true"},
		{"recipe: descriptor key misspelt", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) {
				limits := manifestList(manifestAt(route(r, "/"), "route", "rate_limits"))
				last := manifestList(manifestAt(limits[len(limits)-1], "actions"))
				manifestMap(manifestAt(last[0], "request_headers"))["descriptor_key"] = "apikey"
			})
		}, "apikey: no rule of domain"},
		{"recipe: client address from a header", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) {
				limits := manifestList(manifestAt(route(r, "/"), "route", "rate_limits"))
				manifestMap(limits[0])["actions"] = []any{map[string]any{"request_headers": map[string]any{"header_name": "x-real-ip", "descriptor_key": "remote_address"}}}
			})
		}, "the client would choose the address"},
		{"recipe: a route without the address descriptor", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) {
				a := manifestMap(manifestAt(route(r, "/"), "route"))
				limits := manifestList(a["rate_limits"])
				a["rate_limits"] = limits[len(limits)-1:] // only the api key's
			})
		}, "a ban would not apply"},
		{"rules: a rule no descriptor reaches", func(t *testing.T) []string {
			return recipeWith(t, func(_ map[string]any, files []manifestRLSFile) {
				files[0].doc["descriptors"] = append(manifestList(files[0].doc["descriptors"]),
					map[string]any{"key": "user_id", "rate_limit": map[string]any{"unit": "minute", "requests_per_unit": 10}})
			})
		}, "rule user_id: no descriptor"},
		{"rules: misspelt field", func(t *testing.T) []string {
			return recipeWith(t, func(_ map[string]any, files []manifestRLSFile) {
				rl := manifestMap(manifestAt(manifestList(files[0].doc["descriptors"])[0], "rate_limit"))
				rl["requests_per_units"] = rl["requests_per_unit"]
				delete(rl, "requests_per_unit")
			})
		}, `rate_limit: unknown key "requests_per_units" (did you mean "requests_per_unit"?)`},
		{"rules: burst without token bucket", func(t *testing.T) []string {
			return recipeWith(t, func(_ map[string]any, files []manifestRLSFile) {
				manifestMap(manifestAt(manifestList(files[0].doc["descriptors"])[0], "rate_limit"))["algorithm"] = "sliding_window"
			})
		}, "burst: only with algorithm token_bucket"},
		{"recipe: a release at request time", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) {
				delete(manifestMap(manifestList(manifestAt(route(r, "/api/exports/"), "route", "rate_limits"))[1]), "apply_on_stream_done")
			})
		}, "frees the slot before the request runs"},
		{"recipe: a release naming a fixed value", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) {
				release := manifestMap(manifestList(manifestAt(route(r, "/api/exports/"), "route", "rate_limits"))[1])
				actions := manifestList(release["actions"])
				actions[len(actions)-1] = map[string]any{"generic_key": map[string]any{"descriptor_key": "hold", "descriptor_value": "release"}}
			})
		}, "a refused request's stream-done call would free another request's hold"},
		{"recipe: holds never released", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) {
				a := manifestMap(manifestAt(route(r, "/api/exports/"), "route"))
				limits := manifestList(a["rate_limits"])
				a["rate_limits"] = append([]any{limits[0]}, limits[2:]...)
			})
		}, "holds taken on this route are never released"},
		{"recipe: a reservation's request-time call debits", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) {
				delete(manifestMap(manifestList(manifestAt(route(r, "/v1/chat/completions"), "route", "rate_limits"))[0]), "hits_addend")
			})
		}, "it debits its hits_addend and reserves nothing"},
		{"recipe: a settle without the units used", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) {
				delete(manifestMap(manifestList(manifestAt(route(r, "/v1/chat/completions"), "route", "rate_limits"))[1]), "hits_addend")
			})
		}, "it would settle every request at 1 unit"},
		{"recipe: reservations never settled", func(t *testing.T) []string {
			return recipeWith(t, func(r map[string]any, _ []manifestRLSFile) {
				a := manifestMap(manifestAt(route(r, "/v1/chat/completions"), "route"))
				limits := manifestList(a["rate_limits"])
				a["rate_limits"] = append([]any{limits[0]}, limits[2:]...)
			})
		}, "generic_key=llm -> api_key: holds taken on this route are never released"},
		{"compose: envoy without the recipe", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) { delete(manifestMap(s["envoy"]), "volumes") })
		}, "does not mount " + manifestEnvoyRLSRecipe},
		{"compose: token with one $", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) {
				cmd := manifestList(manifestMap(s["envoy"])["command"])
				cmd[len(cmd)-1] = strings.ReplaceAll(manifestStr(cmd[len(cmd)-1]), "$$", "$")
			})
		}, "compose substitutes it from the host"},
		{"compose: envoy runs the template", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) {
				cmd := manifestList(manifestMap(s["envoy"])["command"])
				cmd[len(cmd)-1] = strings.ReplaceAll(manifestStr(cmd[len(cmd)-1]), "-c /tmp/envoy.yaml", "-c /etc/envoy/ratelimit.yaml.template")
			})
		}, "envoy runs /etc/envoy/ratelimit.yaml.template"},
		{"compose: a limiter's gRPC port moved", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) {
				manifestMap(manifestAt(s, "limiter2", "environment"))["GRPC_LISTEN_ADDR"] = ":9000"
			})
		}, "limiter2's GRPC_LISTEN_ADDR port is 9000"},
		{"compose: a limiter left out of the cluster", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) { delete(manifestMap(s["limiter3"]), "networks") })
		}, "give them a common network alias"},
		{"compose: limiter without the rule files", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) {
				manifestMap(s["limiter1"])["volumes"] = []any{"./deploy/rules.example.yaml:/etc/ratewarden/rules.yaml:ro"}
			})
		}, "nothing is mounted at RLS_CONFIG_DIR"},
		{"compose: envoy's listener not published", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) { manifestMap(s["envoy"])["ports"] = []any{"8089:8080"} })
		}, "listens on 8000, which is not published"},
		{"compose: application not the one nginx fronts", func(t *testing.T) []string {
			return composeWith(t, func(s map[string]any) {
				manifestMap(s["whoami"])["networks"] = map[string]any{"default": nil}
				manifestMap(s["grafana"])["networks"] = map[string]any{"default": map[string]any{"aliases": []any{"app"}}}
			})
		}, "not the application nginx fronts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problems := tt.check(t)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tt.want) }) {
				t.Errorf("no problem mentions %q; got %q", tt.want, problems)
			}
		})
	}
}
