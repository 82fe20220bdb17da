package jsonwire_test

import (
	"encoding/json"
	"testing"

	"github.com/ratewarden/ratewarden/client/internal/jsonwire"
)

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"plain", "hello"},
		{"empty", ""},
		{"quotes and backslash", `a"b\c`},
		{"controls", "\x00\x01\b\f\n\r\t\x1f\x7f"},
		{"html", "<script>&</script>"},
		{"unicode", "héllo 世界 🎉"},
		{"line separators", "a\u2028b\u2029c"},
		{"invalid utf8", "a\xffb\xc3(c\xed\xa0\x80"},
		{"truncated rune at end", "ab\xe4\xb8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := jsonwire.AppendString(nil, tc.in)
			want, err := json.Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("got %s, want %s", got, want)
			}
		})
	}
}
