package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// A user ban's subject is the account's key (the detector and the admin
// API write it so): it refuses every spelling of the account. A ban of one
// exact spelling (written while user ids were case-sensitive) still
// refuses that spelling. With case-sensitive user ids, only the spelling
// banned is refused.
func TestUserBansCoverEverySpelling(t *testing.T) {
	for _, exact := range []bool{false, true} {
		set, err := rules.Compile(&rules.File{}, rules.Options{CaseSensitiveUserIDs: exact})
		if err != nil {
			t.Fatal(err)
		}
		clock := &fakeClock{now: time.Now()}
		bans := NewBanSet(prometheus.NewRegistry())
		bans.Apply(event.ActionBan, event.ScopeUser, "dave", clock.now.Add(time.Hour))
		bans.Apply(event.ActionBan, event.ScopeUser, "Eve", clock.now.Add(time.Hour))
		svc := New(Config{Instance: "test", Now: clock.Now, Bans: bans}, set,
			OpaqueErrors(&modelDecider{mem: decide.NewMemory(), clock: clock}), &capturePublisher{}, zap.NewNop(), prometheus.NewRegistry())
		for user, folded := range map[string]bool{"dave": true, "Dave": true, "DAVE": true, "ｄａｖｅ": true, "Eve": true, "eve": false, "davey": false} {
			want := folded
			if exact {
				want = user == "dave" || user == "Eve"
			}
			var d Decision
			svc.Check(context.Background(), &rules.Request{IP: "198.51.100.1", UserID: user, Endpoint: "/x", Method: "GET", Cost: 1}, &d)
			if got := d.Reason == event.ReasonBanned; got != want {
				t.Errorf("case-sensitive %v: %s banned %v, want %v", exact, user, got, want)
			}
		}
		// Dave, DAVE, ｄａｖｅ and Eve are not their key.
		if got, want := testutil.ToFloat64(svc.metrics.unfoldedUserIDs), map[bool]float64{false: 4, true: 0}[exact]; got != want {
			t.Errorf("case-sensitive %v: rate_limit_unfolded_user_ids_total = %v, want %v", exact, got, want)
		}
	}
}
