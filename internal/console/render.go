package console

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"time"

	"go.uber.org/zap"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static/console.css
var stylesheet []byte

// pages are the parsed templates, one set per page (each page defines
// "content" for the layout).
type pages struct {
	byName map[string]*template.Template
}

// banDurations are the durations a ban or an extension offers.
var banDurations = []string{"15m", "1h", "6h", "24h", "168h", "720h"}

// timelineRanges are the ranges a subject's timeline offers.
var timelineRanges = []string{"1h", "6h", "24h", "168h"}

var funcs = template.FuncMap{
	"fmtTime":    fmtTime,
	"subjectURL": subjectURL,
	"durations":  func() []string { return banDurations },
	"ranges":     func() []string { return timelineRanges },
	"actionForm": func(csrf, scope, subject string) actionForm {
		return actionForm{CSRF: csrf, Scope: scope, Subject: subject}
	},
}

// actionForm is what a lift or extend form needs.
type actionForm struct {
	CSRF, Scope, Subject string
}

func parsePages() *pages {
	p := &pages{byName: map[string]*template.Template{}}
	layout := template.Must(template.New("layout").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html"))
	names, _ := fs.Glob(templateFiles, "templates/*.html")
	for _, file := range names {
		name := file[len("templates/") : len(file)-len(".html")]
		if name == "layout" {
			continue
		}
		p.byName[name] = template.Must(template.Must(layout.Clone()).ParseFS(templateFiles, file))
	}
	return p
}

// fmtTime writes a time in UTC to the second; nil or zero: "-".
func fmtTime(v any) string {
	var t time.Time
	switch x := v.(type) {
	case time.Time:
		t = x
	case *time.Time:
		if x != nil {
			t = *x
		}
	}
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// subjectURL is the subject page of subject in scope.
func subjectURL(scope, subject string) string {
	return "/subject?" + url.Values{"scope": {scope}, "value": {subject}}.Encode()
}

// view is what the layout shows around a page's data.
type view struct {
	Title    string
	Nav      string
	User     string
	Role     string
	Operator bool
	CSRF     string
	Flash    string
	Data     any
}

// titles are the pages' headings.
var titles = map[string]string{"login": "Log in", "error": "Error", "overview": "Overview", "bans": "Active bans",
	"subject": "Subject", "rules": "Rules in force", "audit": "Audit trail"}

// render writes page name with data. The page is rendered in memory first,
// so a template error answers 500 rather than half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, ss session, data any) {
	v := view{Title: titles[name], Nav: name, User: ss.user.Name, Role: string(ss.user.Role),
		Operator: ss.user.Role == Operator, CSRF: ss.csrf, Flash: flash(r), Data: data}
	if e, ok := data.(errorPage); ok && e.Title != "" {
		v.Title = e.Title
	}
	var b bytes.Buffer
	if err := s.pages.byName[name].ExecuteTemplate(&b, "layout", v); err != nil {
		s.cfg.Log.Error("console page not rendered", zap.String("page", name), zap.Error(err))
		http.Error(w, "page not rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// errorPage is the data of the error page.
type errorPage struct {
	Title   string
	Message string
}

// flashes are the messages a redirect after an action may ask for, by
// their key in the query (?done=lifted): the page never echoes free text
// from the URL.
var flashes = map[string]string{
	"banned":       "Banned.",
	"extended":     "Ban extended.",
	"kept":         "A longer ban is in force: it was kept.",
	"lifted":       "Ban lifted: no limiter enforces it any more.",
	"rule-saved":   "Rule saved: every limiter applies it.",
	"rule-deleted": "Dynamic rule deleted.",
}

func flash(r *http.Request) string {
	if r == nil {
		return ""
	}
	return flashes[r.URL.Query().Get("done")]
}

func serveStylesheet(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=3600")
	_, _ = w.Write(stylesheet)
}
