package rulesync

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Store is the dynamic rule store (pgstore.Store): the rules as JSON in the
// rules-file schema, a version of the whole set that moves with every
// change, and an audit row per change.
type Store interface {
	// RulesVersion returns the version of the dynamic rule set: cheap
	// enough to poll.
	RulesVersion(ctx context.Context) (int64, error)
	// DynamicRules returns the dynamic rule set and its version, read so
	// that the two agree.
	DynamicRules(ctx context.Context) (int64, []StoredRule, error)
	// PutRule stores rule under id, with a new set version and its audit
	// row, if the set is still at version base, the one the change was
	// made against; ErrVersionMoved when it moved on.
	PutRule(ctx context.Context, id string, rule json.RawMessage, who Author, base int64) (Change, error)
	// DeleteRule removes the rule id, with a new set version and its audit
	// row, if the set is still at version base; ErrVersionMoved when it
	// moved on, ErrNotStored when no dynamic rule has that id.
	DeleteRule(ctx context.Context, id string, who Author, base int64) (Change, error)
	Close()
}

// StoredRule is one dynamic rule as stored: the rule in the rules-file
// schema as JSON, and which change last wrote it.
type StoredRule struct {
	ID        string
	Rule      json.RawMessage
	Version   int64
	UpdatedAt time.Time
	UpdatedBy string
}

// Author is who makes a change to a dynamic rule, as its audit row records
// it.
type Author struct {
	Actor      string // as declared by the caller
	SourceAddr string // the client address
	Instance   string // the limiter that served the change
}

// Change is a committed change: the set version it produced and the rule
// before and after (nil when absent).
type Change struct {
	Version   int64
	ChangedAt time.Time
	Before    json.RawMessage
	After     json.RawMessage
}

// ErrNotStored is the Store's answer to deleting a rule it does not hold.
// The Manager answers ErrNotFound.
var ErrNotStored = errors.New("no such dynamic rule")

// ErrVersionMoved is the Store's answer to a change made against a version
// of the set another change has replaced since: validated against rules
// no longer stored, it could store a set that does not validate, or undo
// the other change. The Manager makes it again against the new version.
var ErrVersionMoved = errors.New("the dynamic rule set changed meanwhile")
