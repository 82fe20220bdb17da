package loginsim

import (
	"context"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/client"
)

// Target is the limiter the attempts go to.
type Target struct {
	// URL is the limiter's base URL (http://127.0.0.1:8080).
	URL string
	// Token is sent as a bearer token when set (API_TOKENS).
	Token string
}

// Tally counts what became of one actor's attempts.
type Tally struct {
	Attempts    int // sent to the check
	LetThrough  int // allowed, and reported with the application's status
	RateLimited int // refused by a rate limit
	Banned      int // refused by a ban
}

// Play sends the attempts, workers at a time and at most rate attempts a
// second (0: as fast as they go), each a check and, when the check lets it
// through, a report of its status; it returns the tallies by actor. It
// stops at the first request the limiter does not answer as its API says.
func Play(ctx context.Context, t Target, attempts []Attempt, workers int, rate float64) (map[string]*Tally, error) {
	c, err := client.New(client.Config{URL: t.URL, Token: t.Token, Timeout: 5 * time.Second, MaxConns: max(workers, 2)})
	if err != nil {
		return nil, err
	}
	defer c.Close(context.Background())
	tallies := map[string]*Tally{}
	for _, a := range attempts {
		if tallies[a.Actor] == nil {
			tallies[a.Actor] = &Tally{}
		}
	}
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan Attempt)
	for range max(workers, 1) {
		wg.Go(func() {
			for a := range next {
				verdict, err := play(ctx, c, a)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
					cancel()
				}
				tl := tallies[a.Actor]
				tl.Attempts++
				switch verdict {
				case "ok":
					tl.LetThrough++
				case "rate_limited":
					tl.RateLimited++
				case "banned":
					tl.Banned++
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now()
feed:
	for i, a := range attempts {
		if rate > 0 {
			if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					break feed
				}
			}
		}
		select {
		case next <- a:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return tallies, firstErr
	}
	return tallies, ctx.Err()
}

// play makes one attempt: the check, then when it lets the login through
// the report of the login's status. It returns the check's verdict: ok, or
// the reason it was refused.
func play(ctx context.Context, c *client.Client, a Attempt) (string, error) {
	req := client.Request{IP: a.IP, Endpoint: LoginEndpoint, Method: "POST", UserID: a.UserID}
	d, err := c.Check(ctx, &req)
	if err != nil {
		return "", err
	}
	if !d.Allowed {
		return d.Reason, nil
	}
	_, err = c.Report(ctx, &client.Outcome{IP: a.IP, Endpoint: LoginEndpoint, Method: "POST", UserID: a.UserID, Status: a.Status})
	if err != nil {
		return "", err
	}
	return "ok", nil
}
