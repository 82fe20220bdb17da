package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// chromiumNames are the names Chromium's binary has on the PATH.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"}

// chromium starts a headless Chromium of its own for the test (its own
// profile, so its own cookies) and returns its tab. The test is skipped
// without Chromium, or fails when CI is set.
func chromium(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		testkit.Unavailable(t, "no Chromium on the PATH (%v): apt-get install chromium", chromiumNames)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.UserDataDir(t.TempDir()))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	// The first run starts the browser: it takes no timeout (see chromedp.Run).
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// Screenshots: with RATEWARDEN_SCREENSHOTS set to a directory (relative
// to the repository's root, such as docs/img/console), the Chromium test
// saves its pages there as PNG, at a fixed viewport, for docs/console.md.
const (
	screenshotsVar                  = "RATEWARDEN_SCREENSHOTS"
	screenshotWidth, screenshotHigh = 1200, 800
)

// screenshot saves what the tab shows as name.png in the directory of
// RATEWARDEN_SCREENSHOTS; without it, nothing.
func screenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	dir := os.Getenv(screenshotsVar)
	if dir == "" {
		return
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", "..", "..", dir) // the test runs in internal/app/console
	}
	in(t, tab, chromedp.EmulateViewport(screenshotWidth, screenshotHigh))
	png := value(t, tab, chromedp.CaptureScreenshot())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// in runs steps in the tab, each call bounded by a minute.
func in(t *testing.T, tab context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// void drops the value of an action, to run it among steps.
func void[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}

// value runs one action in the tab and returns its value.
func value[T any](t *testing.T, tab context.Context, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// text is the text of the tab's body, after opening path of base when it
// is not "".
func text(t *testing.T, tab context.Context, base, path string) string {
	t.Helper()
	if path != "" {
		in(t, tab, chromedp.Navigate(base+path))
	}
	return value(t, tab, chromedp.Text(chromedp.CSS("body")))
}

// browserLogin logs the tab in through the login form.
func browserLogin(t *testing.T, tab context.Context, base, user, password string) {
	t.Helper()
	in(t, tab,
		chromedp.Navigate(base+"/login"),
		chromedp.SendKeys(chromedp.CSS(`input[name="user"]`), user),
		chromedp.SendKeys(chromedp.CSS(`input[name="password"]`), password),
		chromedp.Click(chromedp.CSS(`form.login button`)),
		chromedp.WaitVisible(chromedp.CSS(`nav`)),
	)
	if got := text(t, tab, "", ""); !strings.Contains(got, user+" (") {
		t.Fatalf("after logging in as %s the page says:\n%s", user, got)
	}
}

// In a real browser against the real services: an operator logs in, sees
// the ban the detector issued with its evidence, opens the subject's
// timeline, lifts the ban, and the limiter admits the subject; a viewer's
// lift is refused; a cross-site form post is refused; a user id holding
// markup is shown as text and runs nothing.
func TestInChromium(t *testing.T) {
	operator := chromium(t)
	viewer := chromium(t)
	s := startStackWithPrometheus(t)
	const ip, other = "203.0.113.60", "203.0.113.61"
	s.banByDetector(t, ip)
	s.banByDetector(t, other)

	browserLogin(t, operator, s.console, "ana", "ana-password")
	bans := text(t, operator, s.console, "/bans?scope=ip&subject="+ip)
	for _, want := range []string{ip, "violations_1h", "/api/item/", "of threshold 5"} {
		if !strings.Contains(bans, want) {
			t.Errorf("the bans page lacks %q:\n%s", want, bans)
		}
	}
	screenshot(t, operator, "bans")
	in(t, operator, chromedp.Click(chromedp.CSS(`td.subject a`)), chromedp.WaitVisible(chromedp.CSS(`h2.subject`)))
	if loc := value(t, operator, chromedp.Location()); !strings.Contains(loc, "/subject?") || !strings.Contains(loc, ip) {
		t.Fatalf("the subject link led to %s", loc)
	}
	testkit.WaitFor(t, time.Minute, "the subject's timeline with its archived ban", func() bool {
		in(t, operator, chromedp.Navigate(s.console+"/subject?scope=ip&range=1h&value="+ip))
		n := value(t, operator, chromedp.Evaluate[int](`document.querySelectorAll("svg.timeline polyline, svg.timeline line.m-ban").length`))
		return n >= 5 && strings.Contains(text(t, operator, "", ""), "violations_1h")
	})
	screenshot(t, operator, "subject")
	subjectPage := value(t, operator, chromedp.Location())

	testkit.WaitFor(t, time.Minute, "the overview's charts and the detector's lag", func() bool {
		page := text(t, operator, s.console, "/")
		return strings.Contains(page, "messages of detector lag on decisions") && strings.Contains(page, "api-per-ip")
	})
	screenshot(t, operator, "overview")
	hitsShown := regexp.MustCompile(`api-per-ip\s+file\s+[1-9]\d*\s+[1-9]\d*`)
	testkit.WaitFor(t, time.Minute, "the rules page's hits and denials", func() bool {
		return hitsShown.MatchString(text(t, operator, s.console, "/rules"))
	})
	screenshot(t, operator, "rules")
	in(t, operator, chromedp.Navigate(subjectPage))

	t.Run("the operator lifts the ban and the limiter admits the subject", func(t *testing.T) {
		in(t, operator,
			chromedp.SendKeys(chromedp.CSS(`form[action="/bans/lift"] input[name="reason"]`), "verified: a partner's test"),
			chromedp.Click(chromedp.CSS(`form[action="/bans/lift"] button`)),
			chromedp.WaitVisible(chromedp.CSS(`p.flash`)),
		)
		// Lifts reach the limiters by pub/sub, well within a second; the
		// bound here is generous so that a loaded machine does not fail the
		// test, and the time seen is logged.
		lifted := time.Now()
		testkit.WaitFor(t, 10*time.Second, "the limiter to stop enforcing the lifted ban", func() bool {
			_, reason := s.check(t, ip, "/api/item/0")
			return reason != "banned"
		})
		t.Logf("the limiter stopped enforcing the ban %v after the lift was answered", time.Since(lifted).Round(time.Millisecond))
		testkit.WaitFor(t, 5*time.Second, "the limiter to admit "+ip, func() bool {
			allowed, _ := s.check(t, ip, "/api/item/0")
			return allowed
		})
		if page := text(t, operator, "", ""); !strings.Contains(page, "Ban lifted") || !strings.Contains(page, "Not banned now") {
			t.Fatalf("after the lift the page says:\n%s", page)
		}
		testkit.WaitFor(t, time.Minute, "the lift in the audit trail", func() bool {
			page := text(t, operator, s.console, "/audit")
			return (strings.Contains(page, "ana\tunban") || strings.Contains(page, "ana unban")) && strings.Contains(page, "verified: a partner's test")
		})
		screenshot(t, operator, "audit")
	})

	t.Run("a viewer's lift is refused", func(t *testing.T) {
		browserLogin(t, viewer, s.console, "vic", "vic-password")
		if n := value(t, viewer, chromedp.Evaluate[int](`document.querySelectorAll('form[action="/bans/lift"]').length`)); n != 0 {
			t.Fatalf("a viewer's page has %d lift forms", n)
		}
		// The form an operator's page would have, with the viewer's own
		// session and token, posted from the console's page.
		in(t, viewer, void(chromedp.Evaluate[bool](fmt.Sprintf(`(() => {
			const f = document.createElement("form");
			f.method = "post"; f.action = "/bans/lift";
			const fields = {csrf: document.querySelector('input[name="csrf"]').value, scope: "ip", subject: %q, reason: "mine"};
			for (const [k, v] of Object.entries(fields)) {
				const i = document.createElement("input"); i.type = "hidden"; i.name = k; i.value = v; f.appendChild(i);
			}
			document.body.appendChild(f); f.submit(); return true;
		})()`, other))), chromedp.WaitVisible(chromedp.CSS(`p.error`)))
		if page := text(t, viewer, "", ""); !strings.Contains(page, "Only operators") {
			t.Fatalf("a viewer's lift answered:\n%s", page)
		}
		if _, reason := s.check(t, other, "/api/item/0"); reason != "banned" {
			t.Fatalf("after the viewer's refused lift the limiter says %q, want banned", reason)
		}
	})

	t.Run("a cross-site form post is refused", func(t *testing.T) {
		const target = "198.51.100.77"
		attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<form id="f" method="post" action="%s/bans">
				<input name="scope" value="ip"><input name="subject" value="%s"><input name="duration" value="1h">
				<input name="reason" value="forged"><input name="csrf" value="guess"></form>
				<script>document.getElementById("f").submit()</script>`, s.console, target)
		}))
		defer attacker.Close()
		// 127.0.0.1 is another site than the console's localhost.
		in(t, operator, chromedp.Navigate(attacker.URL))
		testkit.WaitFor(t, 30*time.Second, "the forged post's answer", func() bool {
			loc := value(t, operator, chromedp.Location())
			return strings.HasPrefix(loc, s.console) && strings.Contains(text(t, operator, "", ""), "cross-site request refused")
		})
		if allowed, reason := s.check(t, target, "/api/x"); !allowed {
			t.Fatalf("the forged ban was applied: %s", reason)
		}
	})

	t.Run("markup in a user id is text", func(t *testing.T) {
		const payload = `<script>document.title="pwned"</script><img src=x onerror="document.title='pwned'">`
		in(t, operator,
			chromedp.Navigate(s.console+"/bans"),
			chromedp.SetValue(chromedp.CSS(`form.ban select[name="scope"]`), "user"),
			chromedp.SendKeys(chromedp.CSS(`form.ban input[name="subject"]`), payload),
			chromedp.SendKeys(chromedp.CSS(`form.ban input[name="reason"]`), "testing <b>markup</b>"),
			chromedp.Click(chromedp.CSS(`form.ban button`)),
			chromedp.WaitVisible(chromedp.CSS(`p.flash`)),
		)
		for _, path := range []string{"", "/bans?scope=user"} {
			page := text(t, operator, s.console, path)
			if !strings.Contains(page, payload) {
				t.Errorf("%q does not show the user id as text:\n%s", path, page)
			}
			if n := value(t, operator, chromedp.Evaluate[int](`document.querySelectorAll("script, img").length`)); n != 0 {
				t.Errorf("%q: %d script or img elements", path, n)
			}
			if title := value(t, operator, chromedp.Title()); strings.Contains(title, "pwned") {
				t.Errorf("%q: the payload ran (title %q)", path, title)
			}
		}
	})
}
