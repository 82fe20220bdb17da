// Command loginsim plays the login traffic of the outcome demo against a
// limiter, as a gateway in front of a login page would: a check before each
// login and, when the check lets it through, a report of what the login
// answered. The traffic is a credential-stuffing botnet, a distributed
// attack on one account and normal users who now and then mistype their
// password (see package loginsim). It prints what became of each actor's
// attempts. With -after-ban, it plays instead what the attackers do after
// the scenario: each of their addresses tries again until the limiter
// refuses it as banned, then a few times more, and it prints whether those
// were refused. Flags only, no environment.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/ratewarden/ratewarden/internal/buildinfo"
	"github.com/ratewarden/ratewarden/internal/loginsim"
)

func main() {
	if buildinfo.Handle(os.Args[1:], os.Stdout, "loginsim") {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "loginsim:", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := loginsim.DefaultConfig()
	var target loginsim.Target
	fs := flag.NewFlagSet("loginsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&target.URL, "url", "http://127.0.0.1:8080", "limiter base `URL`")
	fs.StringVar(&target.Token, "token", "", "bearer `token` (one of the limiter's API_TOKENS; empty: none)")
	workers := fs.Int("workers", 8, "attempts in flight at once")
	rate := fs.Float64("rate", 100, "attempts a second; 0: as fast as they go")
	fs.IntVar(&cfg.Bots, "bots", cfg.Bots, "credential-stuffing addresses")
	fs.IntVar(&cfg.BotAttempts, "bot-attempts", cfg.BotAttempts, "failed logins per bot, each on a user of its own")
	fs.IntVar(&cfg.AttackSources, "attack-sources", cfg.AttackSources, "addresses attacking one account")
	fs.IntVar(&cfg.AttackAttempts, "attack-attempts", cfg.AttackAttempts, "failed logins per attack source")
	fs.StringVar(&cfg.Victim, "victim", cfg.Victim, "the attacked account's user id")
	fs.IntVar(&cfg.NormalUsers, "normal-users", cfg.NormalUsers, "normal users, each from an address of its own")
	fs.IntVar(&cfg.NormalLogins, "normal-logins", cfg.NormalLogins, "logins per normal user")
	fs.IntVar(&cfg.TypoEvery, "typo-every", cfg.TypoEvery, "one normal login in this many starts with a wrong password (0: never)")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the order of the attempts")
	retry := loginsim.Retry{Every: 500 * time.Millisecond, Wait: 30 * time.Second}
	fs.IntVar(&retry.Again, "after-ban", 0, "instead of the scenario, each of its attackers' addresses tries again until refused as banned, then this many `times` more (0: play the scenario)")
	fs.DurationVar(&retry.Every, "retry-every", retry.Every, "with -after-ban, the pause between an address's attempts")
	fs.DurationVar(&retry.Wait, "ban-wait", retry.Wait, "with -after-ban, how long an address tries before it is refused as banned")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 || *workers < 1 || *rate < 0 || cfg.Bots < 0 || cfg.AttackSources < 0 || cfg.NormalUsers < 0 ||
		retry.Again < 0 || retry.Every < 0 || retry.Wait < 0 {
		fmt.Fprintln(stderr, "loginsim: unexpected argument or negative count (see -h)")
		return errUsage
	}
	attempts := loginsim.Scenario(cfg)
	if retry.Again > 0 {
		retry.Workers = *workers
		return afterBan(ctx, target, loginsim.Attackers(attempts), retry, stdout)
	}
	fmt.Fprintf(stdout, "loginsim: %d login attempts at %s (%d bots x %d, %d sources on %q x %d, %d normal users)\n",
		len(attempts), target.URL, cfg.Bots, cfg.BotAttempts, cfg.AttackSources, cfg.Victim, cfg.AttackAttempts, cfg.NormalUsers)
	start := time.Now()
	tallies, err := loginsim.Play(ctx, target, attempts, *workers, *rate)
	fmt.Fprintf(stdout, "%-16s %9s %12s %13s %7s\n", "actor", "attempts", "let through", "rate limited", "banned")
	for _, actor := range slices.Sorted(maps.Keys(tallies)) {
		t := tallies[actor]
		fmt.Fprintf(stdout, "%-16s %9d %12d %13d %7d\n", actor, t.Attempts, t.LetThrough, t.RateLimited, t.Banned)
	}
	fmt.Fprintf(stdout, "in %v\n", time.Since(start).Round(time.Millisecond))
	return err
}

// afterBan plays the attackers' attempts after the scenario and prints, by
// actor, how many of their addresses were refused as banned and whether
// their attempts after that were refused.
func afterBan(ctx context.Context, target loginsim.Target, attackers []loginsim.Attempt, retry loginsim.Retry, stdout io.Writer) error {
	fmt.Fprintf(stdout, "loginsim: %d attacking addresses try again, every %v until refused as banned (%v at most), then %d times more\n",
		len(attackers), retry.Every, retry.Wait, retry.Again)
	counts, err := loginsim.TryAgain(ctx, target, attackers, retry)
	for _, actor := range slices.Sorted(maps.Keys(counts)) {
		n := counts[actor]
		fmt.Fprintf(stdout, "%s: %d of %d addresses refused as banned, then %d of %d attempts after the ban refused (before it: %d attempts answered otherwise)\n",
			actor, n.Banned, n.Addresses, n.Refused, n.Attempts, n.Before)
	}
	return err
}
