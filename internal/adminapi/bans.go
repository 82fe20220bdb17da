package adminapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/jsonwire"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// Blacklist is what the admin API needs of the shared blacklist. Add never
// shortens a ban in force (it reports false when one outlasts ban).
type Blacklist interface {
	Add(ctx context.Context, ban event.Ban) (bool, error)
	Lookup(ctx context.Context, scope, subject string, now time.Time) (event.Ban, bool, error)
	Remove(ctx context.Context, scope, subject string) (bool, error)
	Active(ctx context.Context, now time.Time) ([]event.Ban, error)
}

// BanPublisher writes ban and unban messages to the ban topic, returning once
// they are acknowledged.
type BanPublisher interface {
	Publish(ctx context.Context, bans ...event.Ban) error
}

const (
	maxBanDuration = 365 * 24 * time.Hour
	maxNote        = 256
)

func (h *handler) listBans(w http.ResponseWriter, r *http.Request) {
	bans, err := h.cfg.Blacklist.Active(r.Context(), time.Now())
	if err != nil {
		jsonwire.WriteError(w, http.StatusServiceUnavailable, "blacklist unavailable: "+err.Error())
		return
	}
	out := make([]json.RawMessage, 0, len(bans))
	for _, b := range bans {
		if raw, err := event.EncodeBan(b); err == nil {
			out = append(out, raw)
		}
	}
	body, _ := json.Marshal(map[string]any{"bans": out})
	jsonwire.WriteJSON(w, http.StatusOK, append(body, '\n'))
}

type banRequest struct {
	Scope    string `json:"scope"`
	Subject  string `json:"subject"`
	Duration string `json:"duration"`
	Reason   string `json:"reason"`
}

// addBan bans a subject by hand through the detector's path: the message is
// acknowledged on the ban topic first, then the ban is enforced.
func (h *handler) addBan(w http.ResponseWriter, r *http.Request) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, jsonwire.MaxBody))
	dec.DisallowUnknownFields()
	var req banRequest
	if err := dec.Decode(&req); err != nil {
		h.inputError(w, jsonError(err))
		return
	}
	subject, err := banSubject(req.Scope, req.Subject, h.ipv6Prefix())
	if err != nil {
		h.inputError(w, err)
		return
	}
	if req.Scope == event.ScopeUser {
		subject = h.userKey(subject) // every spelling of the account
	}
	who, err := actor(r)
	if err != nil {
		h.inputError(w, err)
		return
	}
	d, err := time.ParseDuration(req.Duration)
	if err != nil || d < time.Second || d > maxBanDuration {
		h.inputError(w, jsonwire.BadRequest("duration: a Go duration between 1s and %v, such as 30m or 24h", rules.Duration(maxBanDuration)))
		return
	}
	if len(req.Reason) > maxNote {
		h.inputError(w, jsonwire.BadRequest("reason: at most %d bytes", maxNote))
		return
	}
	now := time.Now().UTC()
	ban := event.Ban{
		BanID: uuid.NewString(), TS: now, Action: event.ActionBan, Scope: req.Scope, Subject: subject,
		Reason: "manual", DurationS: int64(d / time.Second), ExpiresAt: now.Add(d), Source: "admin", Note: req.Reason, Actor: who,
	}
	// A ban never shortens a longer one in force (the detector's, say):
	// shortening would free the subject while the detector, whose record
	// still holds the longer ban, only warns about its next offences. To
	// shorten a ban, lift it (DELETE) and ban again.
	current, banned, err := h.cfg.Blacklist.Lookup(r.Context(), ban.Scope, ban.Subject, now)
	if err != nil {
		jsonwire.WriteError(w, http.StatusServiceUnavailable, "ban not applied: "+err.Error())
		return
	}
	if banned && !current.ExpiresAt.Before(ban.ExpiresAt) {
		h.keptBan(w, r, who, current)
		return
	}
	if err := h.cfg.BanPublisher.Publish(r.Context(), ban); err != nil {
		jsonwire.WriteError(w, http.StatusServiceUnavailable, "ban not applied: "+err.Error())
		return
	}
	written, err := h.cfg.Blacklist.Add(r.Context(), ban)
	if err != nil {
		jsonwire.WriteError(w, http.StatusServiceUnavailable, "ban published but not enforced (retry): "+err.Error())
		return
	}
	if !written { // a longer ban arrived meanwhile
		if current, banned, err = h.cfg.Blacklist.Lookup(r.Context(), ban.Scope, ban.Subject, now); err == nil && banned {
			h.keptBan(w, r, who, current)
			return
		}
	}
	if h.cfg.Bans != nil {
		h.cfg.Bans.Apply(event.ActionBan, ban.Scope, ban.Subject, ban.ExpiresAt)
	}
	h.cfg.Log.Info("admin ban", zap.String("actor", who), zap.String("client", h.cfg.Clients.Of(r).String()),
		zap.String("source", r.RemoteAddr), zap.String("scope", ban.Scope),
		zap.String("subject", ban.Subject), zap.Duration("duration", d), zap.String("ban_id", ban.BanID))
	raw, _ := event.EncodeBan(ban)
	jsonwire.WriteJSON(w, http.StatusCreated, append(raw, '\n'))
}

// keptBan answers a ban request that a longer ban in force outlasts: 200
// with that ban, unchanged (201 is for a ban written).
func (h *handler) keptBan(w http.ResponseWriter, r *http.Request, who string, current event.Ban) {
	h.cfg.Log.Info("admin ban kept: a longer ban is in force", zap.String("actor", who),
		zap.String("client", h.cfg.Clients.Of(r).String()), zap.String("source", r.RemoteAddr),
		zap.String("scope", current.Scope), zap.String("subject", current.Subject),
		zap.Time("expires_at", current.ExpiresAt), zap.String("ban_id", current.BanID))
	raw, _ := event.EncodeBan(current)
	jsonwire.WriteJSON(w, http.StatusOK, append(raw, '\n'))
}

// removeBan lifts a ban everywhere and announces it on the ban topic, with
// the caller's reason (the optional query parameter reason) and actor. An
// IPv6 address lifts the ban of its group, or else a ban of the address
// itself (issued with ipv6_prefix 128, or before grouping existed); an
// IPv6 prefix of any length lifts the ban of that prefix, so every ban the
// list shows can be lifted after detection.ipv6_prefix changed. A user id
// lifts the ban of its key (any spelling of the account), or else a ban of
// that exact spelling (issued with case-sensitive user ids).
func (h *handler) removeBan(w http.ResponseWriter, r *http.Request) {
	scope := r.PathValue("scope")
	subjects, err := unbanSubjects(scope, r.PathValue("subject"), h.ipv6Prefix())
	if err != nil {
		h.inputError(w, err)
		return
	}
	if scope == event.ScopeUser {
		if key := h.userKey(subjects[0]); key != subjects[0] {
			subjects = []string{key, subjects[0]}
		}
	}
	who, err := actor(r)
	if err != nil {
		h.inputError(w, err)
		return
	}
	note := r.URL.Query().Get("reason")
	if len(note) > maxNote {
		h.inputError(w, jsonwire.BadRequest("reason: at most %d bytes", maxNote))
		return
	}
	var subject string
	var removed bool
	for _, subject = range subjects {
		if removed, err = h.cfg.Blacklist.Remove(r.Context(), scope, subject); removed || err != nil {
			break
		}
	}
	switch {
	case err != nil:
		jsonwire.WriteError(w, http.StatusServiceUnavailable, "blacklist unavailable: "+err.Error())
		return
	case !removed:
		jsonwire.WriteError(w, http.StatusNotFound, "no active ban for "+scope+" "+subject)
		return
	}
	if h.cfg.Bans != nil {
		h.cfg.Bans.Apply(event.ActionUnban, scope, subject, time.Time{})
	}
	h.cfg.Log.Info("admin unban", zap.String("actor", who), zap.String("client", h.cfg.Clients.Of(r).String()),
		zap.String("source", r.RemoteAddr), zap.String("scope", scope), zap.String("subject", subject))
	unban := event.Ban{BanID: uuid.NewString(), TS: time.Now().UTC(), Action: event.ActionUnban, Scope: scope,
		Subject: subject, Reason: "manual", Source: "admin", Note: note, Actor: who}
	if err := h.cfg.BanPublisher.Publish(r.Context(), unban); err != nil {
		jsonwire.WriteError(w, http.StatusBadGateway, "unbanned, but the unban message was not published: "+err.Error())
		return
	}
	raw, _ := event.EncodeBan(unban)
	jsonwire.WriteJSON(w, http.StatusOK, append(raw, '\n'))
}

// ipv6Prefix is the grouping of IPv6 clients in bans: the rules file's
// detection.ipv6_prefix, which the detector applies too.
func (h *handler) ipv6Prefix() int {
	if h.cfg.BanGrouping == nil {
		return rules.DefaultIPv6Prefix
	}
	return h.cfg.BanGrouping()
}

// userKey is the key of a user id, the subject of its ban (Config.UserKey).
func (h *handler) userKey(id string) string {
	if h.cfg.UserKey == nil {
		return id
	}
	return h.cfg.UserKey(id)
}

// banSubject validates the scope and subject of a new ban. IP subjects are
// normalized as the limiter and the detector see clients: IPv4-mapped IPv6
// as IPv4, an IPv6 address as its group (the /bits prefix, see
// rules.IPSubject); an IPv6 prefix of exactly bits is taken as that group.
func banSubject(scope, subject string, bits int) (string, error) {
	switch {
	case scope != event.ScopeIP && scope != event.ScopeUser:
		return "", jsonwire.BadRequest("scope: ip or user")
	case subject == "" || len(subject) > event.MaxUserID:
		return "", jsonwire.BadRequest("subject: 1 to %d bytes", event.MaxUserID)
	case scope == event.ScopeUser:
		return subject, nil
	}
	if addr, err := netip.ParseAddr(subject); err == nil {
		return rules.IPSubject(addr, bits), nil
	}
	p, ok := rules.ParseIPSubject(subject)
	if !ok || p.Bits() != bits {
		return "", jsonwire.BadRequest("subject: an IP address, or an IPv6 prefix of length %d (detection.ipv6_prefix)", bits)
	}
	return rules.IPSubject(p.Addr(), bits), nil
}

// unbanSubjects validates the scope and subject of an unban and returns the
// subjects to try, in order: an IPv6 address's group, then the address; an
// IPv6 prefix of any length (at least rules.MinIPv6Prefix) as written.
func unbanSubjects(scope, subject string, bits int) ([]string, error) {
	if scope != event.ScopeIP || subject == "" || len(subject) > event.MaxUserID {
		s, err := banSubject(scope, subject, bits)
		return []string{s}, err
	}
	if addr, err := netip.ParseAddr(subject); err == nil {
		group, exact := rules.IPSubject(addr, bits), rules.IPSubject(addr, 128)
		if group == exact {
			return []string{group}, nil
		}
		return []string{group, exact}, nil
	}
	p, ok := rules.ParseIPSubject(subject)
	if !ok || p.Bits() < rules.MinIPv6Prefix {
		return nil, jsonwire.BadRequest("subject: an IP address, or an IPv6 prefix of length %d to 128", rules.MinIPv6Prefix)
	}
	return []string{rules.IPSubject(p.Addr(), p.Bits())}, nil
}
