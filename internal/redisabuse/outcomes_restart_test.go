package redisabuse

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// A credential stuffing split across a detector restart still bans: a new
// outcome engine over the same Redis state continues the sets.
func TestOutcomeEngineRestart(t *testing.T) {
	client := redistest.Client(t)
	prefix := redistest.Prefix(t, client)
	det := rules.Detection{CredentialStuffing: &rules.CredentialStuffingPolicy{DistinctUsers: 4,
		OutcomeScenario: rules.OutcomeScenario{Within: rules.Duration(time.Minute), Duration: rules.Duration(time.Hour)}}}
	now := detectT0.Add(time.Minute)
	newEngine := func() (*abuse.OutcomeEngine, *abusetest.Published) {
		pub := &abusetest.Published{}
		e, err := abuse.NewOutcomeEngine(abuse.OutcomeConfig{Detection: det, Now: func() time.Time { return now }},
			NewDistinct(client, prefix), NewLedger(client, prefix, nil), pub)
		if err != nil {
			t.Fatal(err)
		}
		return e, pub
	}
	batch := func(from, to int) []abuse.OutcomeInput {
		var in []abuse.OutcomeInput
		for i := from; i < to; i++ {
			in = append(in, abuse.OutcomeInput{Partition: 0, Outcome: event.Outcome{EventID: fmt.Sprint("cs-", i),
				TS: detectT0.Add(time.Duration(i) * time.Second), IP: "203.0.113.70", UserID: fmt.Sprint("user-", i),
				Endpoint: "/api/login", Method: "POST", Status: 401, Cost: 1}})
		}
		return in
	}
	ctx := context.Background()
	first, pub := newEngine()
	if _, _, err := first.Process(ctx, batch(0, 3)); err != nil || len(pub.Bans()) != 0 {
		t.Fatalf("before the restart: %v, %+v", err, pub.Bans())
	}
	second, pub := newEngine()
	if _, _, err := second.Process(ctx, batch(3, 5)); err != nil {
		t.Fatal(err)
	}
	bans := pub.Bans()
	if len(bans) != 1 || bans[0].Reason != abuse.ReasonCredentialStuffing || bans[0].Count != 5 {
		t.Fatalf("after the restart: %+v", bans)
	}
	// The same batch again, by a third engine: nothing new.
	third, pub := newEngine()
	if _, _, err := third.Process(ctx, batch(0, 5)); err != nil || len(pub.Bans()) != 0 {
		t.Fatalf("replayed: %v, %+v", err, pub.Bans())
	}
}
