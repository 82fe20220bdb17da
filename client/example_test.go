package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/client"
)

// Put the limiter in front of every route of a ServeMux: the client IP
// behind the load balancer, the user from the application's session, the
// route's pattern as the endpoint; failed logins reported after the
// handler. The application refuses to start with a token the limiter
// refuses, and logs a sample of the errors the failure policy hides.
func ExampleMiddleware() {
	var failures atomic.Int64
	c, err := client.New(client.Config{URL: "http://limiter:8080", Token: os.Getenv("RATEWARDEN_TOKEN"),
		OnError: func(op string, err error) {
			if failures.Add(1)%1000 == 1 { // a limiter down must not flood the log
				log.Printf("ratewarden %s (%d failures so far): %v", op, failures.Load(), err)
			}
		}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx); err != nil {
		log.Fatal(err) // errors.Is(err, client.ErrUnauthorized): not one of the limiter's API_TOKENS
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/books/{id}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "book", r.PathValue("id")) })
	mux.HandleFunc("POST /api/login", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) })

	limited := client.Middleware(c, client.MiddlewareConfig{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, // the load balancers
		User:           func(r *http.Request) string { return r.Header.Get("X-Session-User") },
		Mux:            mux, // endpoints are its patterns: /api/books/{id}
	})(mux)
	log.Fatal(http.ListenAndServe(":8000", limited))
}

// A decision, and what the failure policy answers when no limiter is
// there: nothing listens on port 1, so the check fails open, says so, and
// the error tells that the limiter never answered.
func ExampleClient_Check() {
	c, err := client.New(client.Config{URL: "http://127.0.0.1:1", OnFailure: client.FailOpen, Timeout: 100 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())

	d, err := c.Check(context.Background(), &client.Request{IP: "203.0.113.7", Endpoint: "/api/login", Method: "POST"})
	var e *client.Error
	fmt.Println("allowed:", d.Allowed, "fallback:", d.Fallback, "reason:", d.Reason)
	fmt.Println("limiter answered:", errors.As(err, &e) && e.Answered)
	// Output:
	// allowed: true fallback: true reason: unavailable
	// limiter answered: false
}

// Report the tokens an LLM call used, after the response: rules spent by
// reports (spent_by: report) debit them, and refuse the key's next checks
// once its budget is spent.
func ExampleClient_Report() {
	c, err := client.New(client.Config{URL: "http://limiter:8080"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := c.Report(ctx, &client.Outcome{IP: "203.0.113.7", Endpoint: "/v1/chat/completions", Method: "POST",
		Attributes: map[string]string{"api_key": "k-1"}, Status: 200, Cost: 1834})
	if err != nil {
		log.Print(err)
		return
	}
	for _, b := range res.Rules {
		fmt.Printf("%s: %d of %d left, spent %v\n", b.RuleID, b.Remaining, b.Limit, b.Spent)
	}
}

// Refuse requests when the limiter cannot decide, with a local budget in
// between: a Fallback decides while the breaker is open.
func ExampleFallback() {
	local := func(ctx context.Context, req *client.Request) client.Decision {
		return client.Decision{Allowed: req.Method == http.MethodGet, Reason: "local"}
	}
	c, err := client.New(client.Config{URL: "http://127.0.0.1:1", OnFailure: client.Fallback(local), Timeout: 100 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, m := range []string{"GET", "POST"} {
		d, _ := c.Check(context.Background(), &client.Request{IP: "203.0.113.7", Endpoint: "/api/books/1", Method: m})
		fmt.Println(m, d.Allowed, d.Reason, d.Fallback)
	}
	// Output:
	// GET true local true
	// POST false local true
}

// Ping tells a token the limiter refuses from a limiter that does not
// answer: nothing listens on port 1 here.
func ExampleClient_Ping() {
	c, err := client.New(client.Config{URL: "http://127.0.0.1:1", Token: "not-a-token", Timeout: 100 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())

	err = c.Ping(context.Background())
	var e *client.Error
	fmt.Println("token refused:", errors.Is(err, client.ErrUnauthorized))
	fmt.Println("limiter answered:", errors.As(err, &e) && e.Answered)
	// Output:
	// token refused: false
	// limiter answered: false
}
