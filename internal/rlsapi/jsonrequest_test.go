package rlsapi

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Bodies in the plain shape: the fast reader takes them.
var plainRequests = []string{
	`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"203.0.113.7"}]}]}`,
	"{ \"domain\" : \"edge\" ,\n \"descriptors\" : [ { \"entries\" : [ { \"value\" : \"/api/a\" , \"key\" : \"path\" } , {\"key\":\"method\",\"value\":\"GET\"} ] } , {\"entries\":[]} ] , \"hits_addend\" : 3 }\r\n",
	`{"hitsAddend":4294967295,"domain":"雪 é","descriptors":[]}`,
	`{"descriptors":[{"entries":[{"key":"k"},{"value":"v"},{}]},{}],"domain":""}`,
	`{"hits_addend":0}`,
	`{}`,
}

// Bodies the fast reader leaves to protojson, valid or not.
var otherRequests = []string{
	`{"domain":"a\"b"}`,                // an escape
	`{"domain":"\u0065dge"}`,           // an escape
	`{"domain":null}`,                  // null
	`{"domain":"a","domain":"b"}`,      // a duplicate
	`{"hits_addend":1,"hitsAddend":2}`, // a duplicate under its two names
	`{"hits_addend":"3"}`,              // a quoted number
	`{"hits_addend":1e2}`,              // an exponent
	`{"hits_addend":1.0}`,              // a fraction
	`{"hits_addend":01}`,               // a leading zero
	`{"hits_addend":4294967296}`,       // too large
	`{"hits_addend":-1}`,               // negative
	`{"descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":2}]}`, // a descriptor's own hits_addend
	`{"descriptors":[{"limit":{"requests_per_unit":1,"unit":"SECOND"}}]}`,     // a limit override
	`{"descriptors":[{"entries":[{"key":"k","key":"v"}]}]}`,                   // a duplicate entry member
	`{"descriptors":[{"entries":[],"entries":[]}]}`,                           // a duplicate descriptor member
	`{"domain":"\xff"}`,     // not UTF-8
	"{\"domain\":\"a\tb\"}", // a raw control character
	`{"domain":"a"} x`,      // trailing data
	`{"domain":"a",}`,       // a trailing comma
	`{"Domain":"a"}`,        // another field
	`[]`, ``, `{`, `{"domain"`, `{"domain":}`, `{"descriptors":[{"entries":[{"key":"k",}]}]}`,
}

// TestDecodeRequestJSON: the plain bodies are read as protojson reads
// them; the others are left to it.
func TestDecodeRequestJSON(t *testing.T) {
	for _, body := range plainRequests {
		var ours, theirs rlsv3.RateLimitRequest
		if !decodeRequestJSON([]byte(body), &ours) {
			t.Errorf("%q: left to protojson, want it read", body)
			continue
		}
		if err := protojson.Unmarshal([]byte(body), &theirs); err != nil || !proto.Equal(&ours, &theirs) {
			t.Errorf("%q: read as %v; protojson %v, %v", body, &ours, &theirs, err)
		}
	}
	for _, body := range otherRequests {
		var ours rlsv3.RateLimitRequest
		if decodeRequestJSON([]byte(body), &ours) {
			t.Errorf("%q: read as %v, want it left to protojson", body, &ours)
		}
	}
}

// FuzzDecodeRequestJSON: whatever the body, what the fast reader reads
// protojson reads alike.
func FuzzDecodeRequestJSON(f *testing.F) {
	for _, body := range append(plainRequests, otherRequests...) {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var ours rlsv3.RateLimitRequest
		if !decodeRequestJSON(body, &ours) {
			return
		}
		var theirs rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(body, &theirs); err != nil {
			t.Fatalf("%q: read as %v, which protojson refuses: %v", body, &ours, err)
		}
		if !proto.Equal(&ours, &theirs) {
			t.Fatalf("%q: read as %v, protojson reads %v", body, &ours, &theirs)
		}
	})
}
