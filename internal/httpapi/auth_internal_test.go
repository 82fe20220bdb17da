package httpapi

import (
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
)

// FuzzDecodeCheck: no body makes the decoder panic, and whatever it accepts
// satisfies the invariants the rest of the service relies on.
func FuzzDecodeCheck(f *testing.F) {
	for _, seed := range []string{
		`{"ip":"203.0.113.7","endpoint":"/api/books/17","method":"GET","tier":"BASIC","cost":1,"attributes":{"app_key":"k-1"}}`,
		`{"ip":"::ffff:1.2.3.4","endpoint":"/a/../b?x=1","cost":0}`,
		`{"ip":"1.2.3.4","endpoint":"%2e%2e/x"}`,
		`{"ip":"1.2.3.4"`, `[]`, `null`, `{"ip":"1.2.3.4","endpoint":"/"} x`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeCheck(body)
		if err != nil {
			if _, ok := err.(*jsonwire.InputError); !ok {
				t.Fatalf("error of unexpected type %T: %v", err, err)
			}
			return
		}
		if !req.Addr.IsValid() || req.Addr.Is4In6() || req.IP != req.Addr.String() {
			t.Fatalf("accepted invalid ip %q", req.IP)
		}
		if !strings.HasPrefix(req.Endpoint, "/") || req.Cost < 1 || req.Method == "" || strings.ToUpper(req.Method) != req.Method {
			t.Fatalf("accepted request violates invariants: %+v", req)
		}
	})
}
