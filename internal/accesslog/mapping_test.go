package accesslog

import (
	"strings"
	"testing"
)

func TestParseMapping(t *testing.T) {
	def := DefaultMapping()
	withUser := def
	withUser.User = "remote_user"
	costOff := def
	costOff.Cost = ""
	fromBytes := def
	fromBytes.Cost = CostFromBytes
	for _, tc := range []struct {
		name, text string
		want       Mapping
	}{
		{"empty keeps the defaults", "", def},
		{"the default text", DefaultMappingText, def},
		{"one key changed", "user=remote_user", withUser},
		{"spaces and empty pairs", " user = remote_user ,, ", withUser},
		{"an optional key off", "cost=", costOff},
		{"cost from bytes", "cost=bytes", fromBytes},
		{"every key", "ip=a,user=b,path=c,method=d,status=e,bytes=f,cost=g,time=h,tier=i",
			Mapping{IP: "a", User: "b", Path: "c", Method: "d", Status: "e", Bytes: "f", Cost: "g", Time: "h", Tier: "i"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMapping(tc.text)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			again, err := ParseMapping(got.String())
			if err != nil || again != got {
				t.Fatalf("String %q parses to %+v, %v", got.String(), again, err)
			}
		})
	}
}

func TestParseMappingErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"unknown key", "addr=remote_addr", `unknown key "addr"`},
		{"no equals sign", "remote_addr", `want key=field`},
		{"key twice", "user=a,user=b", `key "user" given twice`},
		{"required key off", "ip=", `key "ip" needs a field`},
		{"status off", "status= ", `key "status" needs a field`},
		{"cost from bytes without bytes", "bytes=,cost=bytes", "bytes is off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMapping(tc.text)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseMapping(%q) = %v, want an error with %q", tc.text, err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error on two lines: %q", err)
			}
		})
	}
}

func TestMappingKeysMatchErrorFields(t *testing.T) {
	fields := map[string]bool{}
	for _, f := range ErrorFields() {
		fields[f] = true
	}
	for _, k := range MappingKeys() {
		if !fields[k] && k != "time" { // an unparsable time falls back, never fails
			t.Errorf("key %q is not an error field", k)
		}
	}
}
