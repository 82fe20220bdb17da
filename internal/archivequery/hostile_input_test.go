package archivequery

// Reads a hostile or careless input must not break: a ban row whose ip
// subject is no address, a prefix as wide as the internet.

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/archiver"
	"github.com/ratewarden/ratewarden/internal/event"
)

// event.DecodeBan accepts a ban of scope "ip" whose subject is no
// address ("not-an-ip"), so the archiver stores it from the ban topic. The
// prefix query casts every ip ban's subject in the range to inet; the one
// bad row fails it ("invalid input syntax for type inet"), and the subject
// page of every prefix says "the archive did not answer" for as long as the
// row is in its range (a week). Reproduced on the console binary by
// inserting the row.
//
// A prefix's ban history skips an ip ban whose subject is no address: the
// query casts only subjects written as addresses or prefixes (inetSyntax).
func TestPrefixBanHistorySkipsSubjectsThatAreNoAddress(t *testing.T) {
	now := time.Now().UTC()
	poison := detectorBan("poison", now.Add(-time.Hour), "not-an-ip", "scan")
	good := detectorBan("good", now.Add(-time.Hour), "203.0.113.7", "scan")
	if poison.Scope != event.ScopeIP {
		t.Fatalf("scope %q", poison.Scope)
	}
	r, _ := archive(t, archiver.Batch{Bans: []event.Ban{poison, good}})
	s, err := ParseSubject("ip", "203.0.113.0/24")
	if err != nil {
		t.Fatal(err)
	}
	bans, err := r.BansOf(context.Background(), s, now.Add(-24*time.Hour), now)
	if err != nil {
		t.Fatalf("the ban history of 203.0.113.0/24 with one ip ban of subject %q in range: %v", poison.Subject, err)
	}
	if len(bans) != 1 || bans[0].BanID != "good" {
		t.Fatalf("history %+v", bans)
	}
}

// A viewer could ask the subject page for 0.0.0.0/0 (or ::/0) over a
// week: every violation and outcome of the week is aggregated, twice a
// page. On the console binary with 3 million violations, 24 such requests
// in parallel from one viewer session held the 8 connections of the pool
// for up to 14 s (some hit the 5 s statement timeout); meanwhile /readyz,
// which pings through the same pool, answered 503 for 3 s running (the
// console leaves its load balancer) and other users' pages took 2-4 s.
//
// The subject page refuses a prefix wider than an operator can mean (IPv4
// shorter than /16, IPv6 shorter than /32); the reads in flight are
// bounded besides (Reader.acquire, and per user in the console).
func TestParseSubjectRefusesPrefixesWiderThanAPage(t *testing.T) {
	for _, wide := range []string{"0.0.0.0/0", "::/0", "0.0.0.0/1", "10.0.0.0/8", "2000::/3"} {
		if s, err := ParseSubject("ip", wide); err == nil {
			t.Errorf("ParseSubject(ip, %s) = %+v: every address of the archive in one page", wide, s)
		}
	}
}

// Every subject inetSyntax admits is one Postgres's inet takes (Go's
// netip is at least as strict), and the usual forms are admitted.
func TestInetSyntaxAdmitsOnlyAddresses(t *testing.T) {
	re := regexp.MustCompile(inetSyntax)
	for _, ok := range []string{"203.0.113.7", "203.0.113.0/24", "0.0.0.0", "2001:db8::1", "2001:db8::/32", "::", "::1",
		"1:2:3:4:5:6:7:8", "fe80::", "2001:DB8::a/128"} {
		if !re.MatchString(ok) {
			t.Errorf("%q not admitted", ok)
		}
	}
	for _, bad := range []string{"not-an-ip", "999.1.1.1", "1.2.3", "01.2.3.4", " 1.2.3.4", "1.2.3.4/33", "1:::2",
		"2001:db8::1::2", "fe80::1%eth0", "2001:db8::/129", "12345::", ""} {
		if re.MatchString(bad) {
			t.Errorf("%q admitted", bad)
		}
	}
}

// Past maxReads in flight a read waits, then answers ErrBusy (or its
// context's end) without touching the pool, whose other connections stay
// free for Ping.
func TestReadsPastTheBoundAnswerBusy(t *testing.T) {
	r := &Reader{reads: make(chan struct{}, 1)}
	release, err := r.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.acquire(context.Background()); !errors.Is(err, ErrBusy) {
		t.Fatalf("a read past the bound: %v, want ErrBusy", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a read of an ended request: %v", err)
	}
	release()
	if release, err = r.acquire(context.Background()); err != nil {
		t.Fatalf("a read after one ended: %v", err)
	}
	release()
	if maxReads >= poolSize {
		t.Fatalf("reads may hold all %d connections: Ping would queue behind them", poolSize)
	}
}

// textPrefix is a necessary condition only: every IPv4 subject a prefix
// covers, written as the limiters write addresses, begins with it.
func TestTextPrefix(t *testing.T) {
	for prefix, want := range map[string]string{
		"203.0.113.0/24": "203.0.113.", "203.0.113.7/32": "203.0.113.", "203.0.112.0/20": "203.0.",
		"203.0.0.0/16": "203.0.", "2001:db8::/32": "", "not a prefix": "",
	} {
		if got := textPrefix(prefix); got != want {
			t.Errorf("textPrefix(%q) = %q, want %q", prefix, got, want)
		}
	}
}
