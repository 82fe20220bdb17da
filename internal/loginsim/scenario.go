// Package loginsim is the login traffic of the outcome demo and of its
// end-to-end test: a credential-stuffing botnet (many addresses, a few
// attempts each, each on a user of its own), a distributed attack on one
// account (many addresses failing on the same user), and normal users who
// now and then mistype their password. Scenario builds the attempts (pure,
// seeded); Play sends them to a limiter as a gateway would: a check before
// each login and, when it is let through, a report of what the login
// answered.
package loginsim

import (
	"fmt"
	"math/rand/v2"
)

// Actors of a scenario.
const (
	ActorNormal   = "normal"
	ActorStuffing = "stuffing"
	ActorAttack   = "account_attack"
)

// LoginEndpoint is the endpoint every attempt logs in at.
const LoginEndpoint = "/api/login"

// Config sizes a scenario.
type Config struct {
	// Bots is the botnet's addresses, each making BotAttempts failed logins
	// on users no other bot tries.
	Bots, BotAttempts int
	// AttackSources is the addresses failing AttackAttempts times each on
	// the account Victim.
	AttackSources, AttackAttempts int
	Victim                        string
	// NormalUsers log in NormalLogins times each from an address of their
	// own; one login in TypoEvery starts with a failure (0: never).
	NormalUsers, NormalLogins, TypoEvery int
	// Seed orders the attempts.
	Seed uint64
}

// DefaultConfig is the demo's scenario: 200 bots with 3 attempts each, 30
// addresses failing twice each on one account, 50 normal users.
func DefaultConfig() Config {
	return Config{Bots: 200, BotAttempts: 3, AttackSources: 30, AttackAttempts: 2, Victim: "victim",
		NormalUsers: 50, NormalLogins: 4, TypoEvery: 4, Seed: 1}
}

// Attempt is one login: who makes it and what the application answers when
// the limiter lets it through (200, or 401 for a wrong password).
type Attempt struct {
	Actor  string
	IP     string
	UserID string
	Status int
}

// Scenario returns the attempts of cfg in the order they are sent: each
// actor's own attempts keep their order (a normal user's failure comes
// before its retry), and every interleaving of the actors is as likely, so
// each actor's attempts spread over the whole run (a normal user's do not
// bunch up at its end, where the actors with more attempts would remain).
func Scenario(cfg Config) []Attempt {
	var queues [][]Attempt
	for b := range cfg.Bots {
		var q []Attempt
		for a := range cfg.BotAttempts {
			q = append(q, Attempt{Actor: ActorStuffing, IP: BotIP(b), UserID: fmt.Sprintf("user-%d", b*cfg.BotAttempts+a), Status: 401})
		}
		queues = append(queues, q)
	}
	for s := range cfg.AttackSources {
		var q []Attempt
		for range cfg.AttackAttempts {
			q = append(q, Attempt{Actor: ActorAttack, IP: AttackIP(s), UserID: cfg.Victim, Status: 401})
		}
		queues = append(queues, q)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 34))
	for u := range cfg.NormalUsers {
		var q []Attempt
		user := fmt.Sprintf("member-%d", u)
		for range cfg.NormalLogins {
			if cfg.TypoEvery > 0 && rng.IntN(cfg.TypoEvery) == 0 {
				q = append(q, Attempt{Actor: ActorNormal, IP: NormalIP(u), UserID: user, Status: 401})
			}
			q = append(q, Attempt{Actor: ActorNormal, IP: NormalIP(u), UserID: user, Status: 200})
		}
		queues = append(queues, q)
	}
	var turns []int // queue i's index once per attempt of it
	for i, q := range queues {
		for range q {
			turns = append(turns, i)
		}
	}
	rng.Shuffle(len(turns), func(a, b int) { turns[a], turns[b] = turns[b], turns[a] })
	out := make([]Attempt, len(turns))
	for n, i := range turns {
		out[n] = queues[i][0]
		queues[i] = queues[i][1:]
	}
	return out
}

// BotIP is the address of bot n: 198.18.0.0/16 (a benchmarking range).
func BotIP(n int) string { return fmt.Sprintf("198.18.%d.%d", n/250, 1+n%250) }

// AttackIP is the address of attack source n: 198.19.0.0/16.
func AttackIP(n int) string { return fmt.Sprintf("198.19.%d.%d", n/250, 1+n%250) }

// NormalIP is the address of normal user n: 100.80.0.0/16.
func NormalIP(n int) string { return fmt.Sprintf("100.80.%d.%d", n/250, 1+n%250) }
