package loginsim

import "testing"

func TestScenario(t *testing.T) {
	cfg := DefaultConfig()
	attempts := Scenario(cfg)
	users := map[string]map[string]bool{} // ip -> users failed on
	failures := map[string]int{}          // ip -> failures
	normalFailuresInARow := map[string]int{}
	count := map[string]int{}
	for _, a := range attempts {
		count[a.Actor]++
		if users[a.IP] == nil {
			users[a.IP] = map[string]bool{}
		}
		if a.Status == 401 {
			users[a.IP][a.UserID] = true
			failures[a.IP]++
		}
		if a.Actor == ActorNormal {
			if a.Status == 401 {
				normalFailuresInARow[a.UserID]++
				if normalFailuresInARow[a.UserID] > 1 {
					t.Fatalf("normal user %s failed twice in a row", a.UserID)
				}
			} else {
				normalFailuresInARow[a.UserID] = 0
			}
		}
	}
	if count[ActorStuffing] != cfg.Bots*cfg.BotAttempts || count[ActorAttack] != cfg.AttackSources*cfg.AttackAttempts ||
		count[ActorNormal] < cfg.NormalUsers*cfg.NormalLogins {
		t.Fatalf("attempts by actor %v", count)
	}
	for b := range cfg.Bots {
		if ip := BotIP(b); len(users[ip]) != cfg.BotAttempts || failures[ip] != cfg.BotAttempts {
			t.Fatalf("bot %s failed on %d users, %d times", ip, len(users[ip]), failures[ip])
		}
	}
	for s := range cfg.AttackSources {
		if ip := AttackIP(s); len(users[ip]) != 1 || !users[ip][cfg.Victim] {
			t.Fatalf("attack source %s failed on %v", ip, users[ip])
		}
	}
	for u := range cfg.NormalUsers {
		if ip := NormalIP(u); len(users[ip]) > 1 {
			t.Fatalf("normal user %s failed on %v", ip, users[ip])
		}
	}
	again := Scenario(cfg)
	for i := range attempts {
		if attempts[i] != again[i] {
			t.Fatal("the same seed gave another order")
		}
	}
}
