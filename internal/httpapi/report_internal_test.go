package httpapi

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/jsonwire"
	"github.com/ratewarden/ratewarden/internal/limiter"
)

// Whatever POST /v1/report and its batch accept is a report within the
// bounds: an HTTP status, a cost of 0 to maxCost (1 when absent), and a
// subject whose outcome event the detector and the archiver accept; what
// they refuse is a 400 (an InputError), never anything else.
func FuzzDecodeReport(f *testing.F) {
	f.Add([]byte(`{"ip":"203.0.113.7","endpoint":"/api/login","method":"POST","user_id":"alice","status":401}`))
	f.Add([]byte(`{"ip":"::1","endpoint":"/v1/chat","status":200,"cost":0,"attributes":{"api_key":"k"}}`))
	f.Add([]byte(`{"reports":[{"ip":"1.2.3.4","endpoint":"/","status":404,"cost":null}]}`))
	f.Add([]byte(`{"status":"401"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(r limiter.Report) {
			o := event.Outcome{EventID: "e", TS: time.Now(), Instance: "i", UserID: r.Request.UserID, IP: r.Request.IP, Endpoint: r.Request.Endpoint,
				Method: r.Request.Method, Tier: r.Request.Tier, Status: r.Status, Cost: r.Request.Cost}
			if err := o.Validate(); err != nil {
				t.Fatalf("accepted %q into an invalid outcome: %v", data, err)
			}
			if r.Request.Cost > maxCost {
				t.Fatalf("cost %d", r.Request.Cost)
			}
			if _, err := event.DecodeOutcome(o.AppendJSON(nil)); err != nil {
				t.Fatalf("its event does not decode: %v", err)
			}
		}
		if r, err := decodeReport(data); err == nil {
			check(r)
			if !json.Valid(data) {
				t.Fatalf("accepted invalid JSON %q", data)
			}
		} else if _, ok := err.(*jsonwire.InputError); !ok {
			t.Fatalf("error %T %v, want an InputError", err, err)
		}
		if rs, err := decodeReportBatch(data); err == nil {
			for _, r := range rs {
				check(r)
			}
		} else if _, ok := err.(*jsonwire.InputError); !ok {
			t.Fatalf("batch error %T %v, want an InputError", err, err)
		}
	})
}
