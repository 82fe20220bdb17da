package loginsim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Target is the limiter the attempts go to.
type Target struct {
	// URL is the limiter's base URL (http://127.0.0.1:8080).
	URL string
	// Token is sent as a bearer token when set (API_TOKENS).
	Token string
	// Client sends the requests; nil: a client of its own with keep-alive
	// connections and a 5 s timeout.
	Client *http.Client
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
	client := t.Client
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: max(workers, 2)}}
		defer client.CloseIdleConnections()
	}
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
				verdict, err := play(ctx, client, t, a)
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
func play(ctx context.Context, client *http.Client, t Target, a Attempt) (string, error) {
	subject := map[string]any{"ip": a.IP, "endpoint": LoginEndpoint, "method": "POST", "user_id": a.UserID}
	var check struct {
		Allowed bool   `json:"allowed"`
		Reason  string `json:"reason"`
	}
	if err := post(ctx, client, t, "/v1/check", subject, &check); err != nil {
		return "", err
	}
	if !check.Allowed {
		return check.Reason, nil
	}
	subject["status"] = a.Status
	if err := post(ctx, client, t, "/v1/report", subject, nil); err != nil {
		return "", err
	}
	return "ok", nil
}

func post(ctx context.Context, client *http.Client, t Target, path string, body any, answer any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL+path, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if t.Token != "" {
		req.Header.Set("Authorization", "Bearer "+t.Token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %d: %.200s", path, resp.StatusCode, data)
	}
	if answer != nil {
		if err := json.Unmarshal(data, answer); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return nil
}
