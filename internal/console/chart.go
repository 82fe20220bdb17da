package console

import (
	"strconv"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/archivequery"
)

// The charts are inline SVG computed here and written by the templates:
// no script draws them, so the CSP forbids scripts outright.

// barChart is a horizontal bar chart: one row per label.
type barChart struct {
	Width, Height int
	Bars          []bar
}

// bar is one row of a bar chart, its geometry in pixels.
type bar struct {
	Label      string
	N          int64
	Y, W       int // the bar's top and width
	TextY      int // the baseline of its label and count
	CountX     int // where its count is written
	LabelWidth int
}

// Bar chart geometry: the labels' column, the widest bar, a row's height.
const (
	barLabelWidth = 180
	barMaxWidth   = 360
	barRow        = 22
)

func newBarChart(counts []archivequery.Count) barChart {
	var top int64
	for _, c := range counts {
		top = max(top, c.N)
	}
	ch := barChart{Width: barLabelWidth + barMaxWidth + 80, Height: max(len(counts), 1) * barRow}
	for i, c := range counts {
		w := 0
		if top > 0 && c.N > 0 {
			w = max(int(c.N*barMaxWidth/top), 1)
		}
		ch.Bars = append(ch.Bars, bar{Label: c.Label, N: c.N, Y: i*barRow + 3, W: w, TextY: i*barRow + 16,
			CountX: barLabelWidth + w + 6, LabelWidth: barLabelWidth - 8})
	}
	return ch
}

// timelineChart is a subject's timeline: a line per series over the
// range, a mark per ban.
type timelineChart struct {
	Width, Height int
	Top           int64 // the largest count, the top of the scale
	Series        []series
	Marks         []mark
	Ticks         []tick
}

type series struct {
	Name   string
	Class  string // the stylesheet's class of its line
	Points string // the polyline's points
	Total  int64
}

// mark is a ban or unban on the timeline.
type mark struct {
	X     int
	Class string
	Title string
}

type tick struct {
	X     int
	Label string
}

// Timeline geometry.
const (
	timelineWidth  = 720
	timelineHeight = 200
	timelinePad    = 20
)

func newTimelineChart(t archivequery.Timeline, bans []archivequery.Ban) timelineChart {
	values := [...]struct {
		name, class string
		of          func(archivequery.Bucket) int64
	}{
		{"violations", "s-violations", func(b archivequery.Bucket) int64 { return b.Violations }},
		{"refused as banned", "s-banned", func(b archivequery.Bucket) int64 { return b.BannedRefusals }},
		{"outcomes", "s-outcomes", func(b archivequery.Bucket) int64 { return b.Outcomes }},
		{"failed outcomes", "s-failures", func(b archivequery.Bucket) int64 { return b.OutcomeFailures }},
	}
	ch := timelineChart{Width: timelineWidth, Height: timelineHeight + timelinePad}
	for _, b := range t.Buckets {
		for _, v := range values {
			ch.Top = max(ch.Top, v.of(b))
		}
	}
	span := t.To.Sub(t.From)
	x := func(at time.Time) int {
		if span <= 0 {
			return 0
		}
		return int(int64(at.Sub(t.From)) * timelineWidth / int64(span))
	}
	y := func(n int64) int {
		if ch.Top == 0 {
			return timelineHeight
		}
		return timelineHeight - int(n*(timelineHeight-timelinePad)/ch.Top)
	}
	for _, v := range values {
		var pts strings.Builder
		s := series{Name: v.name, Class: v.class}
		for _, b := range t.Buckets {
			n := v.of(b)
			s.Total += n
			pts.WriteString(strconv.Itoa(x(b.At.Add(t.Step/2))) + "," + strconv.Itoa(y(n)) + " ")
		}
		s.Points = strings.TrimSpace(pts.String())
		ch.Series = append(ch.Series, s)
	}
	for _, b := range bans {
		if b.TS.Before(t.From) || !b.TS.Before(t.To) {
			continue
		}
		ch.Marks = append(ch.Marks, mark{X: x(b.TS), Class: "m-" + b.Action,
			Title: b.Action + " " + b.Reason + " at " + b.TS.UTC().Format(time.DateTime)})
	}
	for i := 0; i <= 4; i++ {
		at := t.From.Add(span * time.Duration(i) / 4)
		ch.Ticks = append(ch.Ticks, tick{X: x(at), Label: at.UTC().Format("01-02 15:04")})
	}
	return ch
}
