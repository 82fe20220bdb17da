package notifier

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/digest"
)

// secrets is a readFile over a map of files.
func secrets(files map[string]string) func(string) ([]byte, error) {
	return func(path string) ([]byte, error) {
		v, ok := files[path]
		if !ok {
			return nil, fs.ErrNotExist
		}
		return []byte(v), nil
	}
}

func TestParseReceivers(t *testing.T) {
	files := secrets(map[string]string{"/run/token": "s3cret\n", "/run/slack": "https://hooks.example/T/B/x\n", "/run/key": "k"})
	rs, err := ParseReceivers([]byte(`
receivers:
  - name: siem
    url: https://siem.example/hook
    bearer_token_file: /run/token
    header_files: {X-Api-Key: /run/key}
  - name: security-slack
    url_file: /run/slack
    format: slack
    actions: [ban]
    scopes: [ip]
    scenarios: [credential_stuffing, manual]
    manual: false
    dry_run: false
    examples: 3
`), files)
	if err != nil {
		t.Fatal(err)
	}
	siem, slack := rs[0], rs[1]
	if siem.Format != digest.FormatJSON || siem.Examples != DefaultExamples || siem.Headers.Get("Authorization") != "Bearer s3cret" ||
		siem.Headers.Get("X-Api-Key") != "k" || strings.Join(siem.Selector.Actions, ",") != "ban,warn" {
		t.Errorf("siem %+v", siem)
	}
	if slack.URL != "https://hooks.example/T/B/x" || slack.Format != digest.FormatSlack || slack.Examples != 3 ||
		!slack.Selector.SkipManual || !slack.Selector.SkipDryRun || len(slack.Selector.Scenarios) != 2 {
		t.Errorf("slack %+v", slack)
	}
}

func TestParseReceiversRefuses(t *testing.T) {
	files := secrets(map[string]string{"/run/empty": "\n", "/run/slack": "not a url"})
	tests := []struct{ name, yaml, want string }{
		{"empty", "", "empty"},
		{"no receivers", "receivers: []", "no receivers"},
		{"misspelt key", "receivers:\n  - name: a\n    url: http://h/\n    scopse: [ip]\n", `did you mean "scopes"?`},
		{"misspelt top key", "receiver:\n  - name: a\n", `did you mean "receivers"?`},
		{"bad name", "receivers:\n  - name: Bad Name\n    url: http://h/\n", "name:"},
		{"duplicate name", "receivers:\n  - {name: a, url: 'http://h/'}\n  - {name: a, url: 'http://h/'}\n", "taken"},
		{"no url", "receivers:\n  - name: a\n", "url (or url_file) is required"},
		{"both urls", "receivers:\n  - {name: a, url: 'http://h/', url_file: /run/slack}\n", "write one"},
		{"bad scheme", "receivers:\n  - {name: a, url: 'file:///etc/passwd'}\n", "not an http or https URL"},
		{"secret url not echoed", "receivers:\n  - {name: a, url_file: /run/slack}\n", "url_file /run/slack: not an http"},
		{"bad format", "receivers:\n  - {name: a, url: 'http://h/', format: xml}\n", "format"},
		{"bad action", "receivers:\n  - {name: a, url: 'http://h/', actions: [ban, kick]}\n", "actions"},
		{"bad scope", "receivers:\n  - {name: a, url: 'http://h/', scopes: [asn]}\n", "scopes"},
		{"examples out of range", "receivers:\n  - {name: a, url: 'http://h/', examples: 500}\n", "examples"},
		{"missing secret", "receivers:\n  - {name: a, url: 'http://h/', bearer_token_file: /run/none}\n", "bearer_token_file"},
		{"empty secret", "receivers:\n  - {name: a, url: 'http://h/', bearer_token_file: /run/empty}\n", "empty"},
		{"bad header", "receivers:\n  - {name: a, url: 'http://h/', header_files: {'Idempotency-Key': /run/slack}}\n", "not a header name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseReceivers([]byte(tt.yaml), files)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error with %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "not a url") {
				t.Errorf("the error shows a secret: %v", err)
			}
		})
	}
}

func FuzzParseReceivers(f *testing.F) {
	f.Add([]byte("receivers:\n  - {name: a, url: 'http://h/', format: slack, scopes: [ip]}\n"))
	f.Add([]byte("receivers: [{name: a}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := ParseReceivers(data, func(string) ([]byte, error) { return nil, errors.New("no files") })
		if err != nil {
			return
		}
		for _, r := range rs {
			if r.Name == "" || r.URL == "" || (r.Format != digest.FormatJSON && r.Format != digest.FormatSlack) {
				t.Fatalf("accepted %+v", r)
			}
		}
	})
}
