package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestParseCheckBody(t *testing.T) {
	tests := []struct {
		name, in string
		want     checkBody
		err      string
	}{
		{"contract example", `{"user_id": "u-42", "ip": "203.0.113.7", "endpoint": "/api/books/17", "method": "GET",
			"tier": "BASIC", "cost": 1, "attributes": {"app_key": "k-1"}}`,
			checkBody{UserID: "u-42", IP: "203.0.113.7", Endpoint: "/api/books/17", Method: "GET", Tier: "BASIC", Cost: 1, Attributes: map[string]string{"app_key": "k-1"}}, ""},
		{"escapes", `{"user_id":"a\"b\\c\/d\n\u00e9\ud83d\ude00\ud800x"}`, checkBody{UserID: "a\"b\\c/d\né😀\ufffdx"}, ""},
		{"nulls leave fields empty", `{"ip":null,"cost":null,"attributes":null}`, checkBody{}, ""},
		{"negative cost parses (validated later)", `{"cost":-3}`, checkBody{Cost: -3}, ""},
		{"empty", ` `, checkBody{}, "empty body"},
		{"not an object", `[]`, checkBody{}, "expected an object"},
		{"unknown field", `{"color":"red"}`, checkBody{}, `unknown field "color"`},
		{"field names are case-sensitive", `{"IP":"1.2.3.4"}`, checkBody{}, `unknown field "IP"`},
		{"fractional cost", `{"cost":1.5}`, checkBody{}, "cost: must be an integer"},
		{"exponent cost", `{"cost":1e2}`, checkBody{}, "cost: must be an integer"},
		{"huge cost", `{"cost":99999999999999999999}`, checkBody{}, "cost: out of range"},
		{"leading zero", `{"cost":01}`, checkBody{}, "invalid number"},
		{"wrong type", `{"ip":7}`, checkBody{}, "ip: offset 6: expected a string"},
		{"trailing data", `{} {}`, checkBody{}, "unexpected data"},
		{"unterminated", `{"ip":"1.2.`, checkBody{}, "unterminated string"},
		{"raw control character", "{\"ip\":\"a\tb\"}", checkBody{}, "control character"},
		{"invalid utf-8", "{\"ip\":\"\xff\"}", checkBody{}, "not valid UTF-8"},
		{"bad escape", `{"ip":"\x"}`, checkBody{}, `invalid escape`},
		{"missing colon", `{"ip" "x"}`, checkBody{}, "expected ':'"},
		{"missing comma", `{"ip":"x" "tier":"y"}`, checkBody{}, "expected ',' or '}'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got checkBody
			err := parseCheckBody([]byte(tt.in), &got)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// FuzzParseCheckBody holds the hand-written decoder to encoding/json: what it
// accepts, encoding/json (strict, as the contract) accepts with the same
// values.
func FuzzParseCheckBody(f *testing.F) {
	for _, seed := range []string{
		`{"user_id":"u-42","ip":"203.0.113.7","endpoint":"/api/books/17","method":"GET","tier":"BASIC","cost":1,"attributes":{"app_key":"k-1"}}`,
		`{"user_id":"a\"b\\c\/d\n\u00e9\ud83d\ude00\ud800x\udc00"}`, `{"attributes":{"a":"1"},"attributes":{"b":"2"}}`,
		`{"ip":null,"cost":-0}`, ` { } `, `{"i\u0070":"1.2.3.4"}`, `{"cost":9223372036854775807}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var ours checkBody
		if parseCheckBody(data, &ours) != nil {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		var theirs checkBody
		if err := dec.Decode(&theirs); err != nil {
			t.Fatalf("accepted %q, which encoding/json rejects: %v", data, err)
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			t.Fatalf("accepted %q, which has trailing data for encoding/json", data)
		}
		if !reflect.DeepEqual(ours, theirs) {
			t.Fatalf("%q: ours %+v, encoding/json %+v", data, ours, theirs)
		}
	})
}

// FuzzParseBatchBody holds the batch decoder to encoding/json as
// FuzzParseCheckBody holds the check decoder.
func FuzzParseBatchBody(f *testing.F) {
	for _, seed := range []string{
		`{"checks":[{"ip":"203.0.113.7","endpoint":"/a"},{"user_id":"u\u00e9","cost":2,"attributes":{"k":"v"}}]}`,
		`{"checks":[]}`, ` {"checks" : [ { } , {"ip":null} ] } `, `{"ch\u0065cks":[{}]}`, `{"checks":[{}],"checks":[{}]}`,
		`{"checks":[{},]}`, `{"checks":null}`, `[]`, `{"headers":true,"checks":[{}]}`, `{"checks":[{}],"headers":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var ours []checkBody
		var headers bool
		if parseBatchBody(data, &headers, func(_ int, body *checkBody) error { ours = append(ours, *body); return nil }) != nil {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		var theirs struct {
			Checks  []checkBody `json:"checks"`
			Headers bool        `json:"headers"`
		}
		if err := dec.Decode(&theirs); err != nil {
			t.Fatalf("accepted %q, which encoding/json rejects: %v", data, err)
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			t.Fatalf("accepted %q, which has trailing data for encoding/json", data)
		}
		if headers != theirs.Headers {
			t.Fatalf("%q: headers ours %v, encoding/json %v", data, headers, theirs.Headers)
		}
		if len(ours) != len(theirs.Checks) || (len(ours) > 0 && !reflect.DeepEqual(ours, theirs.Checks)) {
			t.Fatalf("%q: ours %+v, encoding/json %+v", data, ours, theirs.Checks)
		}
	})
}
