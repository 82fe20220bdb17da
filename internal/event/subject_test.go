package event

import "testing"

// A decision and an outcome of one request have one subject.
func TestSubjectOfDecisionAndOutcome(t *testing.T) {
	d := Decision{EventID: "d", UserID: "u-42", IP: "203.0.113.7", Endpoint: "/api/login", Method: "POST", Tier: "BASIC", RuleID: "r"}
	o := Outcome{EventID: "o", UserID: "u-42", IP: "203.0.113.7", Endpoint: "/api/login", Method: "POST", Tier: "BASIC", Status: 401}
	want := Subject{UserID: "u-42", IP: "203.0.113.7", Endpoint: "/api/login", Method: "POST", Tier: "BASIC"}
	if got := d.Subject(); got != want {
		t.Errorf("decision subject %+v, want %+v", got, want)
	}
	if got := o.Subject(); got != want {
		t.Errorf("outcome subject %+v, want %+v", got, want)
	}
}
