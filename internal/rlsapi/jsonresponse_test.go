package rlsapi

import (
	"encoding/json"
	"math"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// sameAsProtojson fails t unless appendResponseJSON writes resp as JSON
// that protojson reads back (strictly) as resp, and protojson writes resp
// too.
func sameAsProtojson(t *testing.T, resp *rlsv3.RateLimitResponse) {
	t.Helper()
	out, ok := appendResponseJSON(nil, resp)
	if !ok {
		t.Fatalf("not written: %v", resp)
	}
	if !json.Valid(out) {
		t.Fatalf("%s is not JSON", out)
	}
	var back rlsv3.RateLimitResponse
	if err := protojson.Unmarshal(out, &back); err != nil {
		t.Fatalf("protojson refuses %s: %v", out, err)
	}
	if !proto.Equal(&back, resp) {
		t.Fatalf("%s reads back as %v, want %v", out, &back, resp)
	}
	if _, err := protojson.Marshal(resp); err != nil {
		t.Fatalf("written %s, which protojson refuses to write: %v", out, err)
	}
}

func descStatus(code rlsv3.RateLimitResponse_Code, limit *rlsv3.RateLimitResponse_RateLimit, remaining uint32, reset *durationpb.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: code, CurrentLimit: limit, LimitRemaining: remaining, DurationUntilReset: reset}
}

func TestAppendResponseJSON(t *testing.T) {
	perSecond := &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}
	named := &rlsv3.RateLimitResponse_RateLimit{Name: "per \"ip\"\\\n\t\x01 é 雪", RequestsPerUnit: 5, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE}
	for _, tt := range []struct {
		name string
		resp *rlsv3.RateLimitResponse
	}{
		{"empty", &rlsv3.RateLimitResponse{}},
		{"ok", &rlsv3.RateLimitResponse{OverallCode: codeOK,
			Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{descStatus(codeOK, perSecond, 999, &durationpb.Duration{Nanos: 740_000_000})}}},
		{"over limit, nothing left", &rlsv3.RateLimitResponse{OverallCode: codeOverLimit,
			Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{descStatus(codeOverLimit, named, 0, &durationpb.Duration{Seconds: 59, Nanos: 1})}}},
		{"banned", &rlsv3.RateLimitResponse{OverallCode: codeOverLimit,
			Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{descStatus(codeOverLimit, nil, 0, &durationpb.Duration{Seconds: 3600})}}},
		{"unlimited, no rule", &rlsv3.RateLimitResponse{OverallCode: codeOK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			descStatus(codeOK, nil, math.MaxUint32, nil), descStatus(codeOK, nil, 0, nil)}}},
		{"durations", &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			descStatus(codeOK, nil, 1, &durationpb.Duration{}),
			descStatus(codeOK, nil, 1, &durationpb.Duration{Nanos: 1_000}),
			descStatus(codeOK, nil, 1, &durationpb.Duration{Seconds: 1, Nanos: 1}),
			descStatus(codeOK, nil, 1, &durationpb.Duration{Seconds: -1, Nanos: -500_000_000}),
			descStatus(codeOK, nil, 1, &durationpb.Duration{Nanos: -1}),
			descStatus(codeOK, nil, 1, &durationpb.Duration{Seconds: maxDurationSeconds, Nanos: 999_999_999}),
		}}},
		{"enum values without a name", &rlsv3.RateLimitResponse{OverallCode: 7, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			descStatus(9, &rlsv3.RateLimitResponse_RateLimit{Unit: 42}, 0, nil)}}},
		{"response headers", &rlsv3.RateLimitResponse{OverallCode: codeOK,
			Statuses:             []*rlsv3.RateLimitResponse_DescriptorStatus{descStatus(codeOK, perSecond, 3, &durationpb.Duration{Seconds: 1})},
			ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "RateLimit-Limit", Value: "1000"}, {Key: "X-\"Odd\"", Value: ""}, {}}}},
	} {
		t.Run(tt.name, func(t *testing.T) { sameAsProtojson(t, tt.resp) })
	}
}

// A response with a field the writer does not know, or that protojson
// would refuse, is left to protojson: nothing is appended.
func TestAppendResponseJSONLeavesTheRestToProtojson(t *testing.T) {
	for _, tt := range []struct {
		name string
		resp *rlsv3.RateLimitResponse
	}{
		{"request headers", &rlsv3.RateLimitResponse{RequestHeadersToAdd: []*corev3.HeaderValue{{Key: "a", Value: "b"}}}},
		{"raw body", &rlsv3.RateLimitResponse{RawBody: []byte("x")}},
		{"dynamic metadata", &rlsv3.RateLimitResponse{DynamicMetadata: &structpb.Struct{}}},
		{"quota", &rlsv3.RateLimitResponse{Quota: &rlsv3.RateLimitResponse_Quota{}}},
		{"raw header value", &rlsv3.RateLimitResponse{ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "a", RawValue: []byte("b")}}}},
		{"name not UTF-8", &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			descStatus(codeOK, &rlsv3.RateLimitResponse_RateLimit{Name: "\xff"}, 0, nil)}}},
		{"header not UTF-8", &rlsv3.RateLimitResponse{ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "a", Value: "\xfe"}}}},
		{"duration too long", &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			descStatus(codeOK, nil, 0, &durationpb.Duration{Seconds: maxDurationSeconds + 1})}}},
		{"duration of two signs", &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
			descStatus(codeOK, nil, 0, &durationpb.Duration{Seconds: 1, Nanos: -1})}}},
		{"nil status", &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{nil}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if out, ok := appendResponseJSON([]byte("prefix"), tt.resp); ok || string(out) != "prefix" {
				t.Fatalf("wrote %q, %v; want nothing and false", out, ok)
			}
		})
	}
}

// FuzzAppendResponseJSON: whatever a response of the fields the server
// sets holds, what appendResponseJSON writes protojson reads back as the
// same response, and it writes every such response protojson can write.
func FuzzAppendResponseJSON(f *testing.F) {
	f.Add(int32(1), int32(1), uint32(1000), int32(1), "per-ip", uint32(999), int64(0), int32(740_000_000), "RateLimit-Limit", "1000")
	f.Add(int32(2), int32(2), uint32(0), int32(0), "\"\\\x00\u2028", uint32(0), int64(-3), int32(-1), "", "\xff")
	f.Fuzz(func(t *testing.T, overall, code int32, perUnit uint32, unit int32, name string, remaining uint32, secs int64, nanos int32, key, value string) {
		resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(overall),
			Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{descStatus(rlsv3.RateLimitResponse_Code(code),
				&rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: perUnit, Unit: rlsv3.RateLimitResponse_RateLimit_Unit(unit), Name: name},
				remaining, &durationpb.Duration{Seconds: secs, Nanos: nanos})},
			ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: key, Value: value}}}
		_, theirsErr := protojson.Marshal(resp)
		if _, ok := appendResponseJSON(nil, resp); ok {
			sameAsProtojson(t, resp)
		} else if theirsErr == nil {
			t.Fatalf("not written, though protojson writes it: %v", resp)
		}
	})
}

func TestAppendResponseJSONAllocations(t *testing.T) {
	resp := &rlsv3.RateLimitResponse{OverallCode: codeOK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
		descStatus(codeOK, &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}, 999,
			&durationpb.Duration{Nanos: 740_000_000})}}
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { buf, _ = appendResponseJSON(buf[:0], resp) }); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}
