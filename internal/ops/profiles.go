package ops

import (
	"net/http"
	"net/http/pprof"
)

const profilePrefix = "/debug/pprof/"

// ProfileHandler serves the runtime profiles of net/http/pprof (CPU, heap,
// allocations, goroutines, mutex and block contention, execution trace)
// under /debug/pprof/. It belongs on a listener reachable only by
// operators: a profile costs CPU and shows the process's internals.
func ProfileHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(profilePrefix, pprof.Index)
	mux.HandleFunc(profilePrefix+"cmdline", pprof.Cmdline)
	mux.HandleFunc(profilePrefix+"profile", pprof.Profile)
	mux.HandleFunc(profilePrefix+"symbol", pprof.Symbol)
	mux.HandleFunc(profilePrefix+"trace", pprof.Trace)
	return mux
}
