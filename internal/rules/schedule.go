package rules

import (
	"slices"
	"time"
	_ "time/tzdata" // time zones of daily schedules load on any host

	"github.com/ratewarden/ratewarden/internal/decide"
)

func validateScheduleEntry(e ScheduleEntry, p problems, alg decide.Algorithm, algOK bool) {
	abs := !e.From.IsZero() || !e.To.IsZero()
	switch {
	case e.Daily != nil && abs:
		p.add("daily", "cannot be combined with from/to")
	case e.Daily != nil:
		validateDaily(*e.Daily, p.at("daily"))
	case e.From.IsZero():
		p.add("from", "required (or daily)")
	case e.To.IsZero():
		p.add("to", "required (or daily)")
	case !e.From.Before(e.To.Time):
		p.add("to", "must be after from")
	}
	validateLimits(p, "limits", e.Limits, alg, algOK)
	validateTierLimits(p, "tiers", e.Tiers, alg, algOK)
	if e.Penalty != nil {
		validateMillis(p, "penalty", *e.Penalty, 0)
	}
}

func validateDaily(d Daily, p problems) {
	from, ok1 := parseClock(d.From, false)
	if !ok1 {
		p.add("from", "%q must be HH:MM (00:00 to 23:59)", truncate(d.From, 40))
	}
	to, ok2 := parseClock(d.To, true)
	if !ok2 {
		p.add("to", "%q must be HH:MM (00:00 to 24:00)", truncate(d.To, 40))
	}
	if ok1 && ok2 && from == to {
		p.add("to", "must differ from from")
	}
	switch _, err := time.LoadLocation(d.TZ); {
	case d.TZ == "Local":
		// The host's zone: limiters in different zones would disagree.
		p.add("tz", `"Local" is the zone of each host; name the zone (e.g. Europe/Paris) or leave it out for UTC`)
	case d.TZ != "" && err != nil:
		p.add("tz", "unknown time zone %q", truncate(d.TZ, 64))
	}
}

// parseClock parses "HH:MM" into seconds after midnight; "24:00" only when
// end is true.
func parseClock(s string, end bool) (int, bool) {
	if len(s) != 5 || s[2] != ':' {
		return 0, false
	}
	for _, i := range []int{0, 1, 3, 4} {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	h := int(s[0]-'0')*10 + int(s[1]-'0')
	m := int(s[3]-'0')*10 + int(s[4]-'0')
	if m > 59 || h > 24 || h == 24 && (m != 0 || !end) {
		return 0, false
	}
	return h*3600 + m*60, true
}

func validateEscalation(e Escalation, p problems) {
	if e.Triggers < 1 || e.Triggers > maxTriggers {
		p.add("triggers", "must be between 1 and %d", maxTriggers)
	}
	validateMillis(p, "within", e.Within, time.Millisecond)
	validateMillis(p, "penalty", e.Penalty, time.Millisecond)
	if !e.From.IsZero() && !e.To.IsZero() && !e.From.Before(e.To.Time) {
		p.add("to", "must be after from")
	}
}

// window is a compiled schedule entry.
type window struct {
	daily      bool
	from, to   time.Time      // absolute: from <= now < to
	loc        *time.Location // daily
	fromS, toS int            // daily: seconds after local midnight
	limits     limitSet
	penalty    time.Duration
	hasPenalty bool
}

func compileWindow(e ScheduleEntry) window {
	w := window{from: e.From.Time, to: e.To.Time, limits: compileLimitSet(e.Limits, e.Tiers)}
	if e.Penalty != nil {
		w.penalty, w.hasPenalty = e.Penalty.Std(), true
	}
	if d := e.Daily; d != nil {
		w.daily = true
		w.fromS, _ = parseClock(d.From, false)
		w.toS, _ = parseClock(d.To, true)
		w.loc = time.UTC
		if d.TZ != "" {
			w.loc, _ = time.LoadLocation(d.TZ) // validated
		}
	}
	return w
}

// active reports whether the window contains now. Daily windows use the wall
// clock of their zone: on a DST change a window can be shorter, longer, or
// (in a repeated hour) entered twice.
func (w *window) active(now time.Time) bool {
	if !w.daily {
		return !now.Before(w.from) && now.Before(w.to)
	}
	h, m, s := now.In(w.loc).Clock()
	t := h*3600 + m*60 + s
	if w.fromS < w.toS {
		return w.fromS <= t && t < w.toS
	}
	return t >= w.fromS || t < w.toS // crosses midnight
}

// escalationTimeline gives the escalations active at a time without
// allocating: the bounds of all entries split time into spans, each with a
// precomputed list.
type escalationTimeline struct {
	bounds []time.Time           // sorted, distinct
	spans  [][]decide.Escalation // len(bounds)+1; spans[i] is before bounds[i]
}

func compileEscalations(es []Escalation) escalationTimeline {
	var tl escalationTimeline
	for _, e := range es {
		for _, t := range []time.Time{e.From.Time, e.To.Time} {
			if !t.IsZero() {
				tl.bounds = append(tl.bounds, t)
			}
		}
	}
	slices.SortFunc(tl.bounds, time.Time.Compare)
	tl.bounds = slices.CompactFunc(tl.bounds, time.Time.Equal)
	for i := 0; i <= len(tl.bounds); i++ {
		var at time.Time
		switch {
		case len(tl.bounds) == 0:
		case i == 0:
			at = tl.bounds[0].Add(-1)
		default:
			at = tl.bounds[i-1]
		}
		var span []decide.Escalation
		for _, e := range es {
			if (e.From.IsZero() || !at.Before(e.From.Time)) && (e.To.IsZero() || at.Before(e.To.Time)) {
				span = append(span, decide.Escalation{Triggers: e.Triggers, Within: e.Within.Std(), Penalty: e.Penalty.Std()})
			}
		}
		tl.spans = append(tl.spans, span)
	}
	return tl
}

// at returns the escalations active at now (shared: do not modify).
func (tl *escalationTimeline) at(now time.Time) []decide.Escalation {
	i := 0
	for i < len(tl.bounds) && !now.Before(tl.bounds[i]) {
		i++
	}
	return tl.spans[i]
}
