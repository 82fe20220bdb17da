package clienttest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/ratewarden/ratewarden/client"
	"github.com/ratewarden/ratewarden/client/clienttest"
)

// An application's test puts its handler behind the middleware it uses in
// production, with a Fake for the limiter.
func ExampleFake() {
	f := clienttest.New()
	f.Limit(clienttest.Match{Endpoint: "/api/login"}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/api/login", func(http.ResponseWriter, *http.Request) {})
	h := client.Middleware(f, client.MiddlewareConfig{})(mux)
	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/login", nil))
		fmt.Println(rec.Code)
	}
	// Output:
	// 200
	// 429
}
