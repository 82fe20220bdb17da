package notifier

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/internal/digest"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/yamlkeys"
)

// Receiver is one webhook the notifier sends digests to.
type Receiver struct {
	// Name names the receiver in logs, metrics and digests.
	Name string
	URL  string
	// Format is digest.FormatJSON or digest.FormatSlack.
	Format   string
	Selector digest.Selector
	// Examples bounds the examples of each digest.
	Examples int
	// Headers are sent with every request (Authorization from
	// bearer_token_file, the header_files); their values are secrets.
	Headers http.Header
}

// DefaultExamples is how many examples a digest holds unless its receiver
// says otherwise; MaxExamples is the most a receiver may ask.
const (
	DefaultExamples = 5
	MaxExamples     = 50
)

// receiversFile is the receivers file as written.
type receiversFile struct {
	Receivers []receiverYAML `yaml:"receivers"`
}

type receiverYAML struct {
	Name            string            `yaml:"name"`
	URL             string            `yaml:"url"`
	URLFile         string            `yaml:"url_file"`
	Format          string            `yaml:"format"`
	Actions         []string          `yaml:"actions"`
	Scopes          []string          `yaml:"scopes"`
	Scenarios       []string          `yaml:"scenarios"`
	Manual          *bool             `yaml:"manual"`
	DryRun          *bool             `yaml:"dry_run"`
	Examples        *int              `yaml:"examples"`
	BearerTokenFile string            `yaml:"bearer_token_file"`
	HeaderFiles     map[string]string `yaml:"header_files"`
}

var receiversSchema = yamlkeys.Schema{Type: reflect.TypeFor[receiversFile]()}

// LoadReceivers reads the receivers file at path, and the secrets it names.
func LoadReceivers(path string) ([]Receiver, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("receivers file: %w", err)
	}
	rs, err := ParseReceivers(data, os.ReadFile)
	if err != nil {
		return nil, fmt.Errorf("receivers file %s: %w", path, err)
	}
	return rs, nil
}

var receiverName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// ParseReceivers decodes and validates a receivers file; readFile reads
// the files of its secrets. Unknown keys are refused with the key they
// likely misspell; every problem is reported.
func ParseReceivers(data []byte, readFile func(string) ([]byte, error)) ([]Receiver, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f receiversFile
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty: it lists the receivers under \"receivers:\"")
		}
		return nil, receiversSchema.Explain(data, err)
	}
	if len(f.Receivers) == 0 {
		return nil, errors.New("no receivers: list at least one under \"receivers:\"")
	}
	var errs []error
	out := make([]Receiver, 0, len(f.Receivers))
	for i, ry := range f.Receivers {
		r, err := ry.receiver(readFile)
		if err == nil && slices.ContainsFunc(out, func(o Receiver) bool { return o.Name == r.Name }) {
			err = fmt.Errorf("the name %q is taken by an earlier receiver", r.Name)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("receivers[%d] %s: %w", i, yamlkeys.Shown(ry.Name), err))
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// receiver validates ry and reads its secrets.
func (ry *receiverYAML) receiver(readFile func(string) ([]byte, error)) (Receiver, error) {
	r := Receiver{Name: ry.Name, Format: ry.Format, Examples: DefaultExamples, Headers: http.Header{},
		Selector: digest.Selector{Actions: ry.Actions, Scopes: ry.Scopes, Scenarios: ry.Scenarios}}
	var errs []error
	if !receiverName.MatchString(ry.Name) {
		errs = append(errs, errors.New("name: 1 to 63 of a-z, 0-9, '_', '.', '-', starting with a letter or a digit"))
	}
	if r.Format == "" {
		r.Format = digest.FormatJSON
	}
	if r.Format != digest.FormatJSON && r.Format != digest.FormatSlack {
		errs = append(errs, fmt.Errorf("format: %s is not one of json, slack", yamlkeys.Shown(r.Format)))
	}
	if len(r.Selector.Actions) == 0 {
		r.Selector.Actions = []string{event.ActionBan, event.ActionWarn}
	}
	errs = append(errs, oneOfEach("actions", r.Selector.Actions, event.ActionBan, event.ActionUnban, event.ActionWarn),
		oneOfEach("scopes", r.Selector.Scopes, event.ScopeIP, event.ScopeUser))
	r.Selector.SkipManual = ry.Manual != nil && !*ry.Manual
	r.Selector.SkipDryRun = ry.DryRun != nil && !*ry.DryRun
	if ry.Examples != nil {
		if r.Examples = *ry.Examples; r.Examples < 1 || r.Examples > MaxExamples {
			errs = append(errs, fmt.Errorf("examples: %d is not between 1 and %d", r.Examples, MaxExamples))
		}
	}
	var err error
	if r.URL, err = ry.url(readFile); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, ry.headers(r.Headers, readFile))
	return r, errors.Join(errs...)
}

func oneOfEach(key string, values []string, allowed ...string) error {
	for _, v := range values {
		if !slices.Contains(allowed, v) {
			return fmt.Errorf("%s: %s is not one of %s", key, yamlkeys.Shown(v), strings.Join(allowed, ", "))
		}
	}
	return nil
}

// url returns the receiver's URL, written or read from url_file (a Slack
// webhook's URL is its secret), checked: http or https, with a host.
func (ry *receiverYAML) url(readFile func(string) ([]byte, error)) (string, error) {
	raw, secret := ry.URL, false
	switch {
	case ry.URL != "" && ry.URLFile != "":
		return "", errors.New("url and url_file: write one")
	case ry.URLFile != "":
		b, err := readFile(ry.URLFile)
		if err != nil {
			return "", fmt.Errorf("url_file: %w", err)
		}
		raw, secret = strings.TrimSpace(string(b)), true
	case ry.URL == "":
		return "", errors.New("url (or url_file) is required")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		if secret {
			return "", fmt.Errorf("url_file %s: not an http or https URL with a host", ry.URLFile)
		}
		return "", fmt.Errorf("url: %s is not an http or https URL with a host", yamlkeys.Shown(raw))
	}
	return raw, nil
}

// headers fills h from bearer_token_file and header_files.
func (ry *receiverYAML) headers(h http.Header, readFile func(string) ([]byte, error)) error {
	var errs []error
	secret := func(key, path string) (string, bool) {
		b, err := readFile(path)
		v := strings.TrimSpace(string(b))
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		case v == "" || strings.ContainsAny(v, "\r\n\x00"):
			errs = append(errs, fmt.Errorf("%s: %s is empty or holds a line break", key, path))
		default:
			return v, true
		}
		return "", false
	}
	if ry.BearerTokenFile != "" {
		if v, ok := secret("bearer_token_file", ry.BearerTokenFile); ok {
			h.Set("Authorization", "Bearer "+v)
		}
	}
	for name, path := range ry.HeaderFiles {
		key := "header_files." + name
		if !validHeaderName(name) {
			errs = append(errs, fmt.Errorf("%s: not a header name", yamlkeys.Shown(key)))
			continue
		}
		if v, ok := secret(key, path); ok {
			h.Set(name, v)
		}
	}
	return errors.Join(errs...)
}

var headerNameRE = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")

func validHeaderName(s string) bool {
	return headerNameRE.MatchString(s) && !strings.EqualFold(s, "Content-Type") && !strings.EqualFold(s, "Idempotency-Key")
}
