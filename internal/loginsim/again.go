package loginsim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/client"
)

// Retry paces the attackers' attempts after the scenario (TryAgain).
type Retry struct {
	// Every is the pause between an address's attempts.
	Every time.Duration
	// Wait bounds how long an address tries before the limiter refuses it
	// as banned (each tries once at least); an address still let through
	// then stops, not banned.
	Wait time.Duration
	// Again is the attempts each address makes once refused as banned.
	Again int
	// Workers is the attempts in flight at once.
	Workers int
}

// AfterBan counts what became of one actor's addresses when they kept
// trying after the scenario (TryAgain). Every count comes from the
// limiter's answers.
type AfterBan struct {
	Addresses int // the actor's addresses that tried again
	Banned    int // of them, refused as banned within Retry.Wait
	Before    int // attempts answered otherwise while the ban was on its way
	Attempts  int // attempts after an address was first refused as banned
	Refused   int // of those, refused as banned
}

// Attackers returns one attempt per address of the scenario's attacking
// actors (every actor but the normal users), the last one it made, in the
// order of their first attempts: what each tries again with.
func Attackers(attempts []Attempt) []Attempt {
	last := map[string]int{} // ip -> index in out
	var out []Attempt
	for _, a := range attempts {
		if a.Actor == ActorNormal {
			continue
		}
		if i, ok := last[a.IP]; ok {
			out[i] = a
			continue
		}
		last[a.IP] = len(out)
		out = append(out, a)
	}
	return out
}

// Again is the n-th attempt (from 0) an attacker makes after its last one,
// a: a stuffing bot tries an account it has not tried yet, as it goes
// down its list; any other the same account again.
func Again(a Attempt, n int) Attempt {
	if a.Actor == ActorStuffing {
		a.UserID = fmt.Sprintf("%s-again-%d", a.UserID, n)
	}
	return a
}

// TryAgain makes each of the addresses of attackers try again, as bots do
// after their run: one attempt every r.Every until the limiter refuses the
// address as banned, then r.Again attempts more, whose answers it counts:
// they show whether the ban stopped the address. An attempt the limiter
// lets through is reported like any other (Play). See Again for the
// accounts they try. It returns the counts by
// actor, and stops at the first request the limiter does not answer as its
// API says.
func TryAgain(ctx context.Context, t Target, attackers []Attempt, r Retry) (map[string]*AfterBan, error) {
	c, err := client.New(client.Config{URL: t.URL, Token: t.Token, Timeout: 5 * time.Second, MaxConns: max(r.Workers, 2)})
	if err != nil {
		return nil, err
	}
	defer c.Close(context.Background())
	type address struct {
		a      Attempt
		tries  int
		banned bool // refused as banned once
		after  int  // attempts since
	}
	counts := map[string]*AfterBan{}
	addrs := make([]*address, len(attackers))
	for i, a := range attackers {
		addrs[i] = &address{a: a}
		if counts[a.Actor] == nil {
			counts[a.Actor] = &AfterBan{}
		}
		counts[a.Actor].Addresses++
	}
	deadline := time.Now().Add(r.Wait)
	for {
		round := time.Now()
		var due []*address
		for _, ad := range addrs {
			if (ad.banned && ad.after < r.Again) || (!ad.banned && (ad.tries == 0 || round.Before(deadline))) {
				due = append(due, ad)
			}
		}
		if len(due) == 0 {
			return counts, nil
		}
		batch := make([]Attempt, len(due))
		for i, ad := range due {
			batch[i] = Again(ad.a, ad.tries)
		}
		verdicts, err := playAll(ctx, c, batch, r.Workers)
		for i, ad := range due {
			if i >= len(verdicts) || verdicts[i] == "" {
				continue // not made: the round stopped on an error
			}
			ad.tries++
			n := counts[ad.a.Actor]
			banned := verdicts[i] == client.ReasonBanned
			switch {
			case ad.banned:
				ad.after++
				n.Attempts++
				if banned {
					n.Refused++
				}
			case banned:
				ad.banned = true
				n.Banned++
			default:
				n.Before++
			}
		}
		if err != nil {
			return counts, err
		}
		select {
		case <-time.After(time.Until(round.Add(r.Every))):
		case <-ctx.Done():
			return counts, ctx.Err()
		}
	}
}

// playAll makes the attempts, workers at a time, and returns their
// verdicts in order (empty for an attempt not made); it stops at the first
// error.
func playAll(ctx context.Context, c *client.Client, attempts []Attempt, workers int) ([]string, error) {
	verdicts := make([]string, len(attempts))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	next := make(chan int)
	for range max(workers, 1) {
		wg.Go(func() {
			for i := range next {
				v, err := play(ctx, c, attempts[i])
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
					cancel()
				}
				if err == nil {
					verdicts[i] = v
				}
				mu.Unlock()
			}
		})
	}
feed:
	for i := range attempts {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return verdicts, firstErr
	}
	return verdicts, ctx.Err()
}
