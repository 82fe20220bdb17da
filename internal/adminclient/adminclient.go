// Package adminclient calls the limiters' admin API (internal/adminapi)
// for the console: the bans in force, the rules in force, and bans and
// lifts made by a console user, whose name goes in X-Actor so the ban
// topic and the audit trail record it.
package adminclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

// Client calls one admin API base URL with its bearer token.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client of the admin API at base (http://host:port) with
// token. Calls time out after timeout.
func New(base, token string, timeout time.Duration) *Client {
	return &Client{base: base, token: token, http: &http.Client{Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// maxAnswer bounds an answer's body: a list of a great many bans fits.
const maxAnswer = 64 << 20

// Error is an answer of the admin API other than success: its status and
// its message, which says what was wrong with the input on a 400.
type Error struct {
	Status  int
	Message string
	// Fields are the fields at fault of a refused rule, each with why.
	Fields []FieldError
}

// FieldError is a field of a rule the admin API refused, and why.
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

func (e *Error) Error() string { return fmt.Sprintf("admin API: %d %s", e.Status, e.Message) }

// do sends a request and decodes a successful answer into out (nil: drop
// it). actor, when set, goes in X-Actor.
func (c *Client) do(ctx context.Context, method, path, actor string, body, out any) (int, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case json.RawMessage: // sent as it is: the admin API judges it
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if actor != "" {
		req.Header.Set("X-Actor", actor)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("admin API: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("admin API: read the answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error  string       `json:"error"`
			Fields []FieldError `json:"fields"`
		}
		if json.Unmarshal(raw, &e) != nil || e.Error == "" {
			e.Error = http.StatusText(resp.StatusCode)
		}
		return resp.StatusCode, &Error{Status: resp.StatusCode, Message: e.Error, Fields: e.Fields}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("admin API: decode the answer: %w", err)
		}
	}
	return resp.StatusCode, nil
}

// Bans returns the bans in force, as the limiters enforce them.
func (c *Client) Bans(ctx context.Context) ([]event.Ban, error) {
	var out struct {
		Bans []json.RawMessage `json:"bans"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/v1/admin/bans", "", nil, &out); err != nil {
		return nil, err
	}
	bans := make([]event.Ban, 0, len(out.Bans))
	for _, raw := range out.Bans {
		b, err := event.DecodeBan(raw)
		if err != nil {
			return nil, fmt.Errorf("admin API: %w", err)
		}
		bans = append(bans, b)
	}
	return bans, nil
}

// Ban bans subject in scope for d with reason, as actor. It returns the ban
// in force afterwards and whether it is this one: false when a longer ban
// was in force and was kept.
func (c *Client) Ban(ctx context.Context, scope, subject string, d time.Duration, reason, actor string) (event.Ban, bool, error) {
	body := map[string]string{"scope": scope, "subject": subject, "duration": d.String(), "reason": reason}
	var raw json.RawMessage
	status, err := c.do(ctx, http.MethodPost, "/v1/admin/bans", actor, body, &raw)
	if err != nil {
		return event.Ban{}, false, err
	}
	b, err := event.DecodeBan(raw)
	if err != nil {
		return event.Ban{}, false, fmt.Errorf("admin API: %w", err)
	}
	return b, status == http.StatusCreated, nil
}

// ErrNotBanned is Lift's error when the subject has no ban in force.
var ErrNotBanned = errors.New("no ban in force")

// Lift lifts the ban of subject in scope with reason, as actor.
func (c *Client) Lift(ctx context.Context, scope, subject, reason, actor string) error {
	path := "/v1/admin/bans/" + url.PathEscape(scope) + "/" + url.PathEscape(subject)
	if reason != "" {
		path += "?" + url.Values{"reason": {reason}}.Encode()
	}
	_, err := c.do(ctx, http.MethodDelete, path, actor, nil, nil)
	var e *Error
	if errors.As(err, &e) && e.Status == http.StatusNotFound {
		return ErrNotBanned
	}
	return err
}

// Rules is what GET /v1/admin/rules shows: the rules in force on the
// limiter that answered, and the version each live limiter runs.
type Rules struct {
	Version        string     `json:"version"`
	DynamicVersion int64      `json:"dynamic_version"`
	Instance       string     `json:"instance"`
	File           string     `json:"file"`
	AppliedAt      time.Time  `json:"applied_at"`
	Rules          []Rule     `json:"rules"`
	Instances      []Instance `json:"instances"`
	InstancesError string     `json:"instances_error"`
}

// Rule is one rule in force and where it comes from (file, dynamic, ...).
type Rule struct {
	ID            string          `json:"id"`
	Source        string          `json:"source"`
	OverridesFile bool            `json:"overrides_file"`
	Version       int64           `json:"version"`
	UpdatedAt     time.Time       `json:"updated_at"`
	UpdatedBy     string          `json:"updated_by"`
	Rule          json.RawMessage `json:"rule"`
}

// Instance is a live limiter and the rule-set version it runs.
type Instance struct {
	Instance string    `json:"instance"`
	Version  string    `json:"version"`
	LastSeen time.Time `json:"last_seen"`
	InSync   bool      `json:"in_sync"`
}

// Rules returns the rules in force.
func (c *Client) Rules(ctx context.Context) (Rules, error) {
	var out Rules
	_, err := c.do(ctx, http.MethodGet, "/v1/admin/rules", "", nil, &out)
	return out, err
}

// PutRule creates or replaces the dynamic rule id with body, a rule of the
// rules-file schema as JSON, as actor. A rule the admin API refuses is an
// *Error with its Fields.
func (c *Client) PutRule(ctx context.Context, id string, body []byte, actor string) error {
	_, err := c.do(ctx, http.MethodPut, "/v1/admin/rules/"+url.PathEscape(id), actor, json.RawMessage(body), nil)
	return err
}

// DeleteRule deletes the dynamic rule id, as actor.
func (c *Client) DeleteRule(ctx context.Context, id, actor string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/admin/rules/"+url.PathEscape(id), actor, nil, nil)
	return err
}

// Mode returns the decision mode (redis, local...) the limiter at the base
// URL reports on /readyz, ready or not; "" when it serves no /readyz there
// (its operational routes have a port of their own, OPS_LISTEN_ADDR).
func (c *Client) Mode(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/readyz", nil)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("limiter readiness: %w", err)
	}
	defer resp.Body.Close()
	var ready struct {
		Mode string `json:"mode"`
	}
	if resp.StatusCode == http.StatusNotFound {
		return "", nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&ready); err != nil {
		return "", fmt.Errorf("limiter readiness: %d: %w", resp.StatusCode, err)
	}
	return ready.Mode, nil
}
