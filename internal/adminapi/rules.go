package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/jsonwire"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/rulesync"
)

// RuleAdmin is what the admin API needs of the rule manager
// (rulesync.Manager).
type RuleAdmin interface {
	View() *rulesync.View
	Put(ctx context.Context, id string, body []byte, who rulesync.Author) (rulesync.Result, error)
	SetShadow(ctx context.Context, id string, shadow bool, who rulesync.Author) (rulesync.Result, error)
	Delete(ctx context.Context, id string, who rulesync.Author) (rulesync.Result, error)
}

// maxActor bounds the self-declared actor recorded in the audit trail.
const maxActor = 128

// actorHeader names who makes a change, for the audit trail. The bearer
// token authenticates; this header only attributes.
const actorHeader = "X-Actor"

type ruleJSON struct {
	ID            string     `json:"id"`
	Source        string     `json:"source"`
	OverridesFile bool       `json:"overrides_file,omitzero"`
	Version       int64      `json:"version,omitzero"`
	UpdatedAt     time.Time  `json:"updated_at,omitzero"`
	UpdatedBy     string     `json:"updated_by,omitzero"`
	Rule          rules.Rule `json:"rule"`
}

type instanceJSON struct {
	Instance  string    `json:"instance"`
	Version   string    `json:"version"` // empty: not reported yet
	AppliedAt time.Time `json:"applied_at,omitzero"`
	LastSeen  time.Time `json:"last_seen"`
	InSync    bool      `json:"in_sync"` // runs the version this instance runs
}

// refusalJSON is a version of the dynamic rules this instance refused
// (rulesync.Refusal): the dynamic_version shown runs in its stead.
type refusalJSON struct {
	Version   int64     `json:"version"`
	Rules     []string  `json:"rules"` // the dynamic rules at fault
	Error     string    `json:"error"`
	RefusedAt time.Time `json:"refused_at"`
}

func refusalOf(r *rulesync.Refusal) *refusalJSON {
	if r == nil {
		return nil
	}
	out := &refusalJSON{Version: r.Version, Rules: r.Rules, RefusedAt: r.At}
	if r.Err != nil {
		out.Error = r.Err.Error()
	}
	if out.Rules == nil {
		out.Rules = []string{}
	}
	return out
}

type rulesJSON struct {
	Version        string         `json:"version"`
	DynamicVersion int64          `json:"dynamic_version"`
	DynamicRefused *refusalJSON   `json:"dynamic_refused,omitempty"`
	Instance       string         `json:"instance"`
	File           string         `json:"file"`
	FileHash       string         `json:"file_hash"`
	AppliedAt      time.Time      `json:"applied_at"`
	Rules          []ruleJSON     `json:"rules"`
	Instances      []instanceJSON `json:"instances"`
	InstancesError string         `json:"instances_error,omitempty"`
}

// listRules shows the rules in force here with their sources, the merged
// version, the dynamic version refused here if any, and the version every
// live limiter reports.
func (h *handler) listRules(w http.ResponseWriter, r *http.Request) {
	v := h.cfg.Rules.View()
	out := rulesJSON{Version: v.Version, DynamicVersion: v.DynamicVersion, DynamicRefused: refusalOf(v.DynamicRefused),
		Instance: h.cfg.Instance, File: v.File, FileHash: v.FileHash, AppliedAt: v.AppliedAt,
		Rules: make([]ruleJSON, len(v.Rules)), Instances: []instanceJSON{}}
	for i, rv := range v.Rules {
		out.Rules[i] = ruleJSON{ID: rv.Rule.ID, Source: rv.Source, OverridesFile: rv.OverridesFile, Version: rv.Version,
			UpdatedAt: rv.UpdatedAt, UpdatedBy: rv.UpdatedBy, Rule: rv.Rule}
	}
	if h.cfg.Instances != nil {
		list, err := h.cfg.Instances(r.Context(), time.Now())
		if err != nil {
			out.InstancesError = err.Error()
		}
		for _, in := range list {
			out.Instances = append(out.Instances, instanceJSON{Instance: in.ID, Version: in.RulesVersion,
				AppliedAt: in.RulesAppliedAt, LastSeen: in.LastSeen, InSync: in.RulesVersion == v.Version})
		}
	}
	body, _ := json.Marshal(out)
	jsonwire.WriteJSON(w, http.StatusOK, append(body, '\n'))
}

func (h *handler) putRule(w http.ResponseWriter, r *http.Request) {
	who, err := h.changer(r)
	if err != nil {
		h.inputError(w, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, jsonwire.MaxBody))
	if err != nil {
		h.inputError(w, jsonError(err))
		return
	}
	res, err := h.cfg.Rules.Put(r.Context(), r.PathValue("id"), body, who)
	h.answerChange(w, r.PathValue("id"), res, err)
}

func (h *handler) deleteRule(w http.ResponseWriter, r *http.Request) {
	who, err := h.changer(r)
	if err != nil {
		h.inputError(w, err)
		return
	}
	res, err := h.cfg.Rules.Delete(r.Context(), r.PathValue("id"), who)
	h.answerChange(w, r.PathValue("id"), res, err)
}

func (h *handler) shadowRule(w http.ResponseWriter, r *http.Request) {
	who, err := h.changer(r)
	if err != nil {
		h.inputError(w, err)
		return
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, jsonwire.MaxBody))
	dec.DisallowUnknownFields()
	var req struct {
		Shadow *bool `json:"shadow"`
	}
	if err := dec.Decode(&req); err != nil {
		h.inputError(w, jsonError(err))
		return
	}
	if req.Shadow == nil {
		h.inputError(w, jsonwire.BadRequest(`shadow: required, true or false`))
		return
	}
	res, err := h.cfg.Rules.SetShadow(r.Context(), r.PathValue("id"), *req.Shadow, who)
	h.answerChange(w, r.PathValue("id"), res, err)
}

// changer describes who makes a change: the declared actor, the client
// address and this instance.
func (h *handler) changer(r *http.Request) (rulesync.Author, error) {
	a, err := actor(r)
	if err != nil {
		return rulesync.Author{}, err
	}
	return rulesync.Author{Actor: a, SourceAddr: h.cfg.Clients.Of(r).String(), Instance: h.cfg.Instance}, nil
}

// actor is the self-declared author of an admin change (X-Actor, default
// "admin"), checked before it reaches logs or the audit table.
func actor(r *http.Request) (string, error) {
	a := r.Header.Get(actorHeader)
	if a == "" {
		return "admin", nil
	}
	if len(a) > maxActor || !utf8.ValidString(a) || event.HasControl(a) {
		return "", jsonwire.BadRequest("%s: valid UTF-8 of at most %d bytes without control characters", actorHeader, maxActor)
	}
	return a, nil
}

type fieldJSON struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

type changeJSON struct {
	ID             string          `json:"id"`
	Action         string          `json:"action"` // put or delete
	Version        string          `json:"version"`
	DynamicVersion int64           `json:"dynamic_version"`
	ChangedAt      time.Time       `json:"changed_at"`
	Before         json.RawMessage `json:"before"`
	After          json.RawMessage `json:"after"`
	Announced      bool            `json:"announced"`
	AnnounceError  string          `json:"announce_error,omitempty"`
	// DynamicRefused: the change is stored, but this instance refused the
	// dynamic rules it made (they do not fit its files).
	DynamicRefused *refusalJSON `json:"dynamic_refused,omitempty"`
}

// answerChange maps the outcome of a change: 200 (201 for a new rule),
// 400 with the fields at fault, 404, or 503 when the store is down (or
// its commit's answer was lost and reading the change back failed: then
// the answer says the outcome is unknown, not that nothing changed).
func (h *handler) answerChange(w http.ResponseWriter, id string, res rulesync.Result, err error) {
	var invalid *rulesync.InvalidError
	switch {
	case errors.As(err, &invalid):
		fields := []fieldJSON{}
		for _, fe := range rules.FieldErrors(err) {
			fields = append(fields, fieldJSON{Field: fe.Field, Reason: fe.Reason})
		}
		body, _ := json.Marshal(map[string]any{"error": "invalid rule: " + err.Error(), "fields": fields})
		jsonwire.WriteJSON(w, http.StatusBadRequest, append(body, '\n'))
		return
	case errors.Is(err, rulesync.ErrNotFound):
		jsonwire.WriteError(w, http.StatusNotFound, err.Error())
		return
	case errors.Is(err, rulesync.ErrOutcomeUnknown):
		jsonwire.WriteError(w, http.StatusServiceUnavailable, "rule change outcome unknown, GET /v1/admin/rules shows whether it was made: "+err.Error())
		return
	case err != nil:
		jsonwire.WriteError(w, http.StatusServiceUnavailable, "rule not changed: "+err.Error())
		return
	}
	out := changeJSON{ID: id, Action: "put", Version: res.View.Version, DynamicVersion: res.Change.Version,
		ChangedAt: res.Change.ChangedAt, Before: orNull(res.Change.Before), After: orNull(res.Change.After),
		Announced: res.AnnounceErr == nil}
	if r := res.View.DynamicRefused; r != nil && r.Version == res.Change.Version {
		out.DynamicRefused = refusalOf(r)
	}
	if res.Change.After == nil {
		out.Action = "delete"
	}
	if res.AnnounceErr != nil {
		out.AnnounceError = res.AnnounceErr.Error()
	}
	status := http.StatusOK
	if res.Change.Before == nil {
		status = http.StatusCreated
	}
	body, _ := json.Marshal(out)
	jsonwire.WriteJSON(w, status, append(body, '\n'))
}

func orNull(b json.RawMessage) json.RawMessage {
	if b == nil {
		return json.RawMessage("null")
	}
	return b
}

// LiveInstance is a live limiter as the heartbeats show it, with the
// rule-set version it reported (empty: not reported yet).
type LiveInstance struct {
	ID             string
	LastSeen       time.Time
	RulesVersion   string
	RulesAppliedAt time.Time
}
