package accesslog

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

// FuzzParseLine: any line either parses into an outcome that downstream
// consumers accept as it is (it survives the ratelimit.outcomes encoding
// unchanged), or is refused with an *Error naming one of ErrorFields.
func FuzzParseLine(f *testing.F) {
	f.Add([]byte(nginxLine), "")
	f.Add([]byte(nginxLine), "cost=bytes,time=time_iso8601")
	f.Add([]byte(`{"remote_addr":"::ffff:1.2.3.4","request_uri":"/a/../%00;x?y","status":200,"msec":1.5}`), "")
	f.Add([]byte(`{"remote_addr":"unix:","request_uri":"","status":"-"}`), "")
	f.Add([]byte(`{"a":"1.2.3.4","b":"/","c":"204","d":"-1"}`), "ip=a,path=b,status=c,cost=d")
	f.Add([]byte(`[]`), "")
	f.Fuzz(func(t *testing.T, line []byte, mapping string) {
		m, err := ParseMapping(mapping)
		if err != nil {
			m = DefaultMapping()
		}
		src := Source{Topic: "access", Partition: 1, Offset: 7, Time: time.Unix(1795257000, 0)}
		o, err := m.Parse(line, src)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !slices.Contains(ErrorFields(), e.Field) {
				t.Fatalf("Parse error %v (%T), want an *Error naming one of %v", err, err, ErrorFields())
			}
			return
		}
		if err := o.Validate(); err != nil {
			t.Fatalf("Parse returned an invalid outcome %+v: %v", o, err)
		}
		if o.EventID != EventID(src) || o.Instance != src.Topic || o.Banned {
			t.Fatalf("id, instance or banned not as documented: %+v", o)
		}
		back, err := event.DecodeOutcome(o.AppendJSON(nil))
		if err != nil {
			t.Fatalf("the outcome %+v does not decode: %v", o, err)
		}
		if !back.TS.Equal(o.TS.Truncate(time.Microsecond)) {
			t.Fatalf("ts %v decodes as %v", o.TS, back.TS)
		}
		back.TS = o.TS
		if back != o {
			t.Fatalf("outcome %+v decodes as %+v", o, back)
		}
	})
}

// FuzzParseMapping: a mapping that parses has its required keys, and its
// text form parses back to it.
func FuzzParseMapping(f *testing.F) {
	f.Add(DefaultMappingText)
	f.Add("user=remote_user,cost=bytes")
	f.Add("ip=,x=y")
	f.Add(" a = b = c ")
	f.Fuzz(func(t *testing.T, text string) {
		m, err := ParseMapping(text)
		if err != nil {
			return
		}
		if m.IP == "" || m.Path == "" || m.Status == "" {
			t.Fatalf("ParseMapping(%q) = %+v: a required key is off", text, m)
		}
		again, err := ParseMapping(m.String())
		if err != nil || again != m {
			t.Fatalf("ParseMapping(%q).String() = %q parses to %+v, %v", text, m.String(), again, err)
		}
	})
}
