package console

import (
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/archivequery"
)

func TestBarChart(t *testing.T) {
	ch := newBarChart([]archivequery.Count{{Label: "scan", N: 10}, {Label: "violations_1h", N: 5}, {Label: "rare", N: 0}})
	if len(ch.Bars) != 3 || ch.Bars[0].W != barMaxWidth || ch.Bars[1].W != barMaxWidth/2 || ch.Bars[2].W != 0 {
		t.Fatalf("bars %+v: want the largest full width, the others in proportion", ch.Bars)
	}
	if ch.Height != 3*barRow || ch.Bars[1].Y != barRow+3 {
		t.Fatalf("geometry %+v", ch)
	}
	if empty := newBarChart(nil); len(empty.Bars) != 0 || empty.Height == 0 {
		t.Fatalf("empty chart %+v", empty)
	}
}

func TestTimelineChart(t *testing.T) {
	from := time.Now().Truncate(time.Hour)
	tl := archivequery.Timeline{From: from, To: from.Add(4 * time.Minute), Step: time.Minute, Buckets: []archivequery.Bucket{
		{At: from, Violations: 4}, {At: from.Add(time.Minute), Violations: 2, BannedRefusals: 8},
		{At: from.Add(2 * time.Minute), Outcomes: 3, OutcomeFailures: 1}, {At: from.Add(3 * time.Minute)},
	}}
	bans := []archivequery.Ban{{TS: from.Add(2 * time.Minute), Action: "ban", Reason: "scan"},
		{TS: from.Add(-time.Minute), Action: "ban"}} // before the range: no mark
	ch := newTimelineChart(tl, bans)
	if ch.Top != 8 || len(ch.Series) != 4 || ch.Series[0].Total != 6 || ch.Series[1].Total != 8 {
		t.Fatalf("chart %+v", ch)
	}
	if pts := strings.Fields(ch.Series[1].Points); len(pts) != 4 || pts[1] != "270,20" || pts[0] != "90,200" {
		t.Fatalf("refused-as-banned points %q: want the peak at the top, zero on the axis", ch.Series[1].Points)
	}
	if len(ch.Marks) != 1 || ch.Marks[0].X != timelineWidth/2 || ch.Marks[0].Class != "m-ban" {
		t.Fatalf("marks %+v: want the one ban in range, half way", ch.Marks)
	}
}
