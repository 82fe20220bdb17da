package archiver

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

// The archive's tables (CONTRACT.md, "Postgres"): the values of
// RowError.Table and of the table label of the inserted-rows metric.
const (
	ViolationsTable  = "rate_limit_violations"
	BansTable        = "bans"
	OutcomesTable    = "outcomes"
	DeadLettersTable = "dead_letters"
)

// Violation is one row of rate_limit_violations.
type Violation struct {
	EventID    string // a UUID
	OccurredAt time.Time
	UserID     string // empty for an anonymous request: stored as NULL
	IP         string
	Endpoint   string
	Method     string
	Tier       string
	RuleID     string
	Algorithm  string
	Reason     string
	Limit      int64
	// CurrentCount is the units used in the rule's window when it decided.
	CurrentCount int64
	RetryAfterMs int64
	Shadow       bool
	Instance     string
	// Domain and Descriptors (the event's descriptors as JSON) are those of
	// a decision of Envoy's rate limit API; empty otherwise (NULL).
	Domain, Descriptors string
}

// ViolationFrom is the row of a decision. CurrentCount is Limit - Remaining
// (units used), at least 0. Which decisions are violations (allowed = false
// or shadow = true) is the caller's choice.
func ViolationFrom(ev event.Decision) Violation {
	return Violation{
		EventID: ev.EventID, OccurredAt: ev.TS, UserID: ev.UserID, IP: ev.IP,
		Endpoint: ev.Endpoint, Method: ev.Method, Tier: ev.Tier, RuleID: ev.RuleID,
		Algorithm: ev.Algorithm, Reason: ev.Reason, Limit: ev.Limit,
		CurrentCount: max(ev.Limit-ev.Remaining, 0),
		RetryAfterMs: ev.RetryAfterMS, Shadow: ev.Shadow, Instance: ev.Instance,
		Domain: ev.Domain, Descriptors: descriptorsJSON(ev.Descriptors),
	}
}

// descriptorsJSON is the JSON of a rate limit API decision's descriptors,
// "" for other decisions.
func descriptorsJSON(ds []event.Descriptor) string {
	if len(ds) == 0 {
		return ""
	}
	b, _ := json.Marshal(ds) // strings and slices only: cannot fail
	return string(b)
}

// DeadLetter is a message that can never be archived: its Kafka position,
// its raw value and why it was rejected.
type DeadLetter struct {
	Topic     string
	Partition int
	Offset    int64
	Raw       []byte
	Error     string
}

// Batch is what Store.Write stores in one transaction.
type Batch struct {
	Violations  []Violation
	Bans        []event.Ban
	Outcomes    []event.Outcome
	DeadLetters []DeadLetter
}

// Result counts the rows a Store.Write inserted, per table, and the rows it
// skipped because they were already there (redeliveries).
type Result struct {
	Violations, Bans, Outcomes, DeadLetters int
	Duplicates                              int
}

// RowError is Store.Write's error when one row of the batch cannot be
// stored: the archiver should not have sent it (it fails ValidateViolation,
// ValidateBan or ValidateOutcome), or the database rejected it for a reason they do not
// know. Nothing of the batch was stored.
type RowError struct {
	Table string // ViolationsTable, BansTable, OutcomesTable or DeadLettersTable
	Index int    // in the Batch slice of that table
	Err   error
}

func (e *RowError) Error() string { return fmt.Sprintf("%s row %d: %v", e.Table, e.Index, e.Err) }
func (e *RowError) Unwrap() error { return e.Err }
