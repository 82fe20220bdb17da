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
	// Change changes the rule id, with a new set version and its audit
	// row: prepare, given the set and its version while no other change
	// can be made, returns the rule to store as JSON (nil: delete the rule)
	// or an error, returned as it is with nothing changed. ErrNotStored
	// when deleting a rule that is not stored.
	Change(ctx context.Context, id string, who Author, prepare Prepare) (Change, error)
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

// ErrOutcomeUnknown is the Store's answer to a change whose commit was
// sent but whose answer was lost, when reading the change back failed
// too: it may have been stored. The admin API says so rather than "not
// changed".
var ErrOutcomeUnknown = errors.New("the change may or may not have been stored")

// Prepare makes a change against the dynamic rule set at version: the rule
// to store as JSON, nil to delete it, or why not. Validated against the
// set it lands on, a change can neither undo another made meanwhile nor
// store a set that does not validate.
type Prepare func(version int64, stored []StoredRule) (json.RawMessage, error)
