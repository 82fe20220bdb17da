package abuse

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// The reasons of the bans (and, for an account attack, the warning) the
// outcome engine issues.
const (
	ReasonCredentialStuffing = "credential_stuffing"
	ReasonBruteForce         = "brute_force"
	ReasonAccountAttack      = "account_attack"
	ReasonProbing            = "probing"
)

// OutcomeConfig is what the outcome engine detects.
type OutcomeConfig struct {
	// Detection holds the scenarios; NewOutcomeEngine fills what is left
	// out (rules.Detection.WithDefaults).
	Detection rules.Detection
	// Exempt reports the subjects exempt whoever their user, by address or
	// endpoint (the service wires it to rules.Set.ExemptRequest): their
	// outcomes are skipped. Nil: none.
	Exempt func(event.Subject) bool
	// ExemptUser reports the subjects of exempt accounts, by tier or user
	// id (the service wires it to rules.Set.ExemptUser): their outcomes
	// count for their source, never for the account. Nil: none.
	ExemptUser func(event.Subject) bool
	// UserKey returns the key of a user id (the service wires it to
	// rules.Set.UserKey): every spelling of one account is one account,
	// for account_attack and the distinct users of credential_stuffing.
	// Nil: the id as sent.
	UserKey func(string) string
	// Now is the detector's own clock, which bounds event time. Nil:
	// time.Now.
	Now func() time.Time
}

// OutcomeInput is one outcome and the topic and partition it was read
// from: outcome reports and gateway access logs come from topics of their
// own, whose partitions are apart for lateness.
type OutcomeInput struct {
	Topic     string
	Partition int
	Outcome   event.Outcome
}

// topicPartition names a partition of one of the outcomes' topics.
type topicPartition struct {
	topic     string
	partition int
}

// OutcomeEngine applies the outcome scenarios of the detection section
// (credential stuffing, brute force, account attack, probing) to batches of
// outcomes, with the guarantees of Engine: event time bounded by the
// detector's clock, lateness per partition against the grace (partitions of
// the outcomes topic, tracked apart from the decisions'), the same Ledger
// protocol (claim, publish, settle) and ban ids (BanID), so a repeated
// detection is a no-op and a redelivery publishes the same ids. Its state
// lives in Distinct and Ledger. Process may be called concurrently, and
// SetConfig while it runs.
type OutcomeEngine struct {
	cur atomic.Pointer[outcomeEngine]
}

// outcomeEngine is one configuration of an OutcomeEngine: what SetConfig
// replaces. Its partitions' marks are the OutcomeEngine's.
type outcomeEngine struct {
	issuer[topicPartition]
	det       rules.Detection
	exempt    func(event.Subject) bool
	scenarios []*outcomeScenario
	// owners is the account attack scenario when it is enabled: its
	// successes are recorded, to recognize an account's owner.
	owners *outcomeScenario
	// failure[s] is true when status s is a failure of some scenario: any
	// other outcome costs a bounds check and a lookup.
	failure [event.MaxStatus + 1]bool
	d       Distinct

	exemptUser func(event.Subject) bool
	userKey    func(string) string
}

// outcomeScenario is one enabled scenario, compiled.
type outcomeScenario struct {
	reason    string
	threshold int64
	within    time.Duration
	duration  time.Duration
	lock      time.Duration // account attack: lock the account this long
	statuses  [event.MaxStatus + 1]bool
	endpoints rules.EndpointSet
	dryRun    bool
	spec      DistinctSpec
	// Account attack: the statuses and methods that show the account's
	// owner, and the prefixes of the networks its sources are counted in.
	success       [event.MaxStatus + 1]bool
	successMethod func(string) bool
	ipv4, ipv6    int
}

// NewOutcomeEngine returns an engine keeping its sets in d and its bans in
// l, and publishing what it issues with pub. The scenarios' endpoint
// patterns must be valid (rules validation checks them); an invalid one is
// an error.
func NewOutcomeEngine(cfg OutcomeConfig, d Distinct, l Ledger, pub Publisher) (*OutcomeEngine, error) {
	cur, err := newOutcomeEngine(cfg, d, newIssuer[topicPartition](cfg.Now, 0, 0, l, pub))
	if err != nil {
		return nil, err
	}
	e := &OutcomeEngine{}
	e.cur.Store(cur)
	return e, nil
}

// SetConfig puts cfg in force from the next batch on, as Engine.SetConfig
// does; on an error (an invalid endpoint pattern) the configuration in
// force stays.
func (e *OutcomeEngine) SetConfig(cfg OutcomeConfig) error {
	old := e.cur.Load()
	cur, err := newOutcomeEngine(cfg, old.d, old.issuer)
	if err != nil {
		return err
	}
	e.cur.Store(cur)
	return nil
}

func newOutcomeEngine(cfg OutcomeConfig, d Distinct, is issuer[topicPartition]) (*outcomeEngine, error) {
	det := cfg.Detection.WithDefaults()
	is.now, is.skew, is.grace = clockOf(cfg.Now), det.MaxClockSkew.Std(), det.Grace.Std()
	e := &outcomeEngine{issuer: is,
		det: det, exempt: cfg.Exempt, exemptUser: cfg.ExemptUser, d: d}
	e.userKey = keyOfUser(cfg.UserKey)
	add := func(reason string, threshold int64, s *rules.OutcomeScenario, lock time.Duration) error {
		if !s.On() {
			return nil
		}
		eps, err := rules.CompileEndpoints(s.Endpoints)
		if err != nil {
			return fmt.Errorf("detection.%s: %w", reason, err)
		}
		sc := &outcomeScenario{reason: reason, threshold: threshold, within: s.Within.Std(), duration: s.Duration.Std(),
			lock: lock, endpoints: eps, dryRun: s.DryRun || det.DryRun}
		for _, st := range s.Statuses {
			if st >= event.MinStatus && st <= event.MaxStatus {
				sc.statuses[st], e.failure[st] = true, true
			}
		}
		sc.spec = DistinctSpec{Window: sc.within, Grace: e.grace, Cap: threshold + 1, Threshold: threshold,
			Samples: det.Samples, AllOnCross: reason == ReasonAccountAttack}
		e.scenarios = append(e.scenarios, sc)
		return nil
	}
	for _, err := range []error{
		add(ReasonCredentialStuffing, det.CredentialStuffing.DistinctUsers, &det.CredentialStuffing.OutcomeScenario, 0),
		add(ReasonBruteForce, det.BruteForce.Failures, &det.BruteForce.OutcomeScenario, 0),
		add(ReasonAccountAttack, det.AccountAttack.DistinctSources, &det.AccountAttack.OutcomeScenario, det.AccountAttack.LockAccount.Std()),
		add(ReasonProbing, det.Probing.DistinctEndpoints, &det.Probing.OutcomeScenario, 0),
	} {
		if err != nil {
			return nil, err
		}
	}
	for _, sc := range e.scenarios {
		if sc.reason == ReasonAccountAttack {
			e.owners = sc
			sc.ipv4, sc.ipv6 = det.AccountAttack.Networks(det.IPv6Prefix)
			for st := range sc.success {
				sc.success[st] = det.AccountAttack.SuccessStatus(st)
			}
			sc.successMethod = det.AccountAttack.SuccessMethod
		}
	}
	return e, nil
}

// BanReasons returns the reasons of the enabled scenarios, so that metrics
// labelled by reason start each at 0.
func (e *OutcomeEngine) BanReasons() []string { return e.cur.Load().banReasons() }

// WarnReasons returns account_attack when that scenario is enabled: its
// warning names the account attacked.
func (e *OutcomeEngine) WarnReasons() []string { return e.cur.Load().warnReasons() }

func (e *outcomeEngine) banReasons() []string {
	out := make([]string, len(e.scenarios))
	for i, sc := range e.scenarios {
		out[i] = sc.reason
	}
	return out
}

func (e *outcomeEngine) warnReasons() []string {
	for _, sc := range e.scenarios {
		if sc.reason == ReasonAccountAttack {
			return []string{ReasonAccountAttack}
		}
	}
	return nil
}

// MaxClockSkew returns detection.max_clock_skew.
func (e *OutcomeEngine) MaxClockSkew() time.Duration { return e.cur.Load().skew }

// outcomeAdd is what one Distinct add was made for.
type outcomeAdd struct {
	sc     *outcomeScenario
	ev     *event.Outcome
	at     time.Time // the time it is decided at
	source string
}

// Process tallies a batch of outcomes, in order, and claims, publishes and
// settles the bans and warnings they trigger; it returns what it published
// (each ban id once), in order. An outcome counts when its status is a
// failure of a scenario (and its endpoint matches the scenario's
// endpoints); it is skipped when Banned (its source was: bans never feed
// bans), when it is exempt whoever its user (Exempt) or when it has no
// client address (0.0.0.0, ::); one on a banned (UserBanned) or exempt
// account counts for its source but not for the account (account_attack,
// the account's own scenario, skips it); and it is
// ignored as late when older than the newest outcome seen on its partition
// by more than the grace. An outcome with a success status of the account
// attack (answering one of its success methods, on its endpoints, with a
// user id) is recorded as its source's trust on the account, so that the
// owner is not banned with the account's attackers. Event time is bounded by the detector's clock as
// Engine.Process bounds it. On error nothing of the batch is kept by the
// engine (Distinct and Ledger are idempotent, so the batch can be processed
// again, and publishes the same bans).
func (e *OutcomeEngine) Process(ctx context.Context, in []OutcomeInput) ([]Claimed, Stats, error) {
	cur := e.cur.Load()
	return process(ctx, &cur.issuer, in, &distinctTally{e: cur})
}

// distinctTally counts a batch of outcomes in the scenarios' distinct sets:
// an add per scenario an outcome fails, and the account owners' successes.
type distinctTally struct {
	e      *outcomeEngine
	adds   []DistinctAdd
	refs   []outcomeAdd // what each add was made for
	owners ownerSuccesses
	counts []DistinctCount // recorded, one per add
}

func (t *distinctTally) place(in *OutcomeInput) (topicPartition, time.Time, string) {
	return topicPartition{in.Topic, in.Partition}, in.Outcome.TS, in.Outcome.Instance
}

func (t *distinctTally) take(st *Stats, in *OutcomeInput, at time.Time, late bool) {
	e, ev := t.e, &in.Outcome
	if !late && e.owners.succeeded(ev) && t.owners.record(&t.adds, &t.refs, e.owners, ev, e.userKey(ev.UserID), at, e.det.IPv6Prefix) {
		st.Successes++
	}
	if ev.Status < 0 || ev.Status > event.MaxStatus || !e.failure[ev.Status] {
		return
	}
	switch {
	case ev.Banned || ev.IP == "0.0.0.0" || ev.IP == "::" || (e.exempt != nil && e.exempt(ev.Subject())):
		st.Skipped++
		return
	case late:
		st.Late++
		return
	}
	st.Failures++
	// A locked or exempt account stops its own scenario only: the
	// sources that fail on it are still counted.
	accountHeld := ev.UserID != "" && (ev.UserBanned || (e.exemptUser != nil && e.exemptUser(ev.Subject())))
	if accountHeld {
		st.HeldAccounts++
	}
	source, account := rules.IPSubjectOf(ev.IP, e.det.IPv6Prefix), e.userKey(ev.UserID)
	for _, sc := range e.scenarios {
		if !sc.statuses[ev.Status] || !sc.endpoints.Match(ev.Endpoint) {
			continue
		}
		set := DistinctSet{Offender: Offender{Scope: event.ScopeIP, Subject: source}, Name: sc.reason}
		var member, group string
		switch sc.reason {
		case ReasonCredentialStuffing:
			member = account
		case ReasonBruteForce:
			member = ev.EventID // a redelivered outcome counts once
		case ReasonAccountAttack:
			if accountHeld {
				continue
			}
			set.Offender = Offender{Scope: event.ScopeUser, Subject: account}
			member, group = source, rules.IPNetwork(ev.IP, sc.ipv4, sc.ipv6)
		case ReasonProbing:
			member = ev.Endpoint
		}
		if set.Offender.Subject == "" || member == "" {
			continue // no user id: nothing to count for the user scenarios
		}
		t.adds = append(t.adds, DistinctAdd{Set: set, Spec: sc.spec, Member: member, Group: group, EventID: ev.EventID, TS: at})
		t.refs = append(t.refs, outcomeAdd{sc: sc, ev: ev, at: at, source: source})
	}
}

func (t *distinctTally) record(ctx context.Context) error {
	if len(t.adds) == 0 {
		return nil
	}
	counts, err := t.e.d.Add(ctx, t.adds)
	if err != nil {
		return fmt.Errorf("add outcomes: %w", err)
	}
	if len(counts) != len(t.adds) {
		return fmt.Errorf("add outcomes: %d counts for %d adds", len(counts), len(t.adds))
	}
	t.counts = counts
	return nil
}

func (t *distinctTally) claims(st *Stats, now time.Time, claim func(Claim) error) error {
	for i := range t.counts {
		cs, spared := t.e.claims(&t.refs[i], &t.counts[i], now)
		st.Spared += spared
		for _, c := range cs {
			if err := claim(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// claims returns what one add triggers, and how many sources it spared.
// Nothing unless the add introduced its member into a set over the
// threshold: a member seen again (a user retried, a source failed again)
// claims nothing, so a flood costs no ledger round trip per outcome. An
// account attack bans, when its count crosses, every source of the set
// but those trusted (the owner's), warns about the account and (with
// lock_account) bans it; after that, each new source as it comes, unless
// trusted.
func (e *outcomeEngine) claims(r *outcomeAdd, c *DistinctCount, now time.Time) ([]Claim, int) {
	sc := r.sc
	if !c.Introduced || c.Count <= sc.threshold {
		return nil, 0
	}
	ts := r.at
	if ts.After(now) {
		ts = now
	}
	esc := Escalation{Factor: e.det.Escalation.Factor, Cap: e.det.Escalation.Cap.Std(), Period: e.det.Escalation.Period.Std()}
	ban := func(scope, subject string, d time.Duration, ev event.Evidence) Claim {
		ev.FirstTS, ev.LastTS = c.First, c.Last
		return Claim{Ban: event.Ban{
			BanID: BanID(scope, subject, sc.reason, r.ev.EventID), TS: ts, Action: event.ActionBan,
			Scope: scope, Subject: subject, Reason: sc.reason, Count: c.Count, Threshold: sc.threshold,
			WindowS: ceilSeconds(sc.within), DurationS: ceilSeconds(d), Source: SourceDetector, DryRun: sc.dryRun,
			Evidence: ev,
		}, Escalation: esc}
	}
	switch sc.reason {
	case ReasonCredentialStuffing:
		return []Claim{ban(event.ScopeIP, r.source, sc.duration, event.Evidence{SampleUsers: clipSamples(c.Members)})}, 0
	case ReasonBruteForce:
		ev := event.Evidence{SampleEndpoints: clipSamples([]string{r.ev.Endpoint})}
		if r.ev.UserID != "" {
			ev.SampleUsers = clipSamples([]string{r.ev.UserID})
		}
		return []Claim{ban(event.ScopeIP, r.source, sc.duration, ev)}, 0
	case ReasonProbing:
		return []Claim{ban(event.ScopeIP, r.source, sc.duration, event.Evidence{SampleEndpoints: clipSamples(c.Members)})}, 0
	}
	// Account attack: the set is the account's sources, counted by network.
	account := e.userKey(r.ev.UserID)
	onAccount := event.Evidence{SampleUsers: clipSamples([]string{account})}
	if !c.Crossed {
		if c.Trusted {
			return nil, 1
		}
		return []Claim{ban(event.ScopeIP, r.source, sc.duration, onAccount)}, 0
	}
	out := make([]Claim, 0, len(c.Members)+2)
	for _, source := range c.Members {
		out = append(out, ban(event.ScopeIP, source, sc.duration, onAccount))
	}
	onSources := event.Evidence{SampleSources: clipSamples(c.Members[:min(len(c.Members), e.det.Samples)]),
		SparedSources: clipSamples(c.Spared[:min(len(c.Spared), e.det.Samples)])}
	warn := ban(event.ScopeUser, account, 0, onSources)
	warn.Ban.BanID = BanID(event.ScopeUser, account, event.ActionWarn+"/"+sc.reason, r.ev.EventID)
	warn.Ban.Action, warn.Ban.DurationS, warn.Escalation, warn.WarnFor = event.ActionWarn, 0, Escalation{}, sc.within
	out = append(out, warn)
	if sc.lock > 0 {
		out = append(out, ban(event.ScopeUser, account, sc.lock, onSources))
	}
	return out, len(c.Spared)
}

// succeeded reports whether ev shows the owner of its account at its
// source: a success status of the account attack scenario (sc, nil when
// it is off) answering one of its success methods on its endpoints, with a
// user id and a client address.
func (sc *outcomeScenario) succeeded(ev *event.Outcome) bool {
	return sc != nil && ev.Status >= 0 && ev.Status <= event.MaxStatus && sc.success[ev.Status] && ev.UserID != "" &&
		ev.IP != "0.0.0.0" && ev.IP != "::" && sc.successMethod(ev.Method) && sc.endpoints.Match(ev.Endpoint)
}

// ownerSuccesses are the successes of a batch recorded so far, so that a
// user's repeated successes from one source in a batch (an authenticated
// session's requests) cost one add: the first, at the latest time.
type ownerSuccesses map[ownerSuccess]int // the index of its add

type ownerSuccess struct{ account, source string }

// record appends the add that trusts ev's source on account, the key of
// its user id (sc's set), to adds, with its ref, or moves the one of the
// batch forward to ev's time. It reports whether it appended one.
func (o *ownerSuccesses) record(adds *[]DistinctAdd, refs *[]outcomeAdd, sc *outcomeScenario, ev *event.Outcome, account string, at time.Time, ipv6 int) bool {
	k := ownerSuccess{account, rules.IPSubjectOf(ev.IP, ipv6)}
	if i, ok := (*o)[k]; ok {
		if at.After((*adds)[i].TS) {
			(*adds)[i].TS = at
		}
		return false
	}
	if *o == nil {
		*o = ownerSuccesses{}
	}
	(*o)[k] = len(*adds)
	set := DistinctSet{Offender: Offender{Scope: event.ScopeUser, Subject: k.account}, Name: sc.reason}
	*adds = append(*adds, DistinctAdd{Set: set, Spec: sc.spec, Member: k.source, EventID: ev.EventID, TS: at, Trust: true})
	*refs = append(*refs, outcomeAdd{sc: sc, ev: ev, at: at, source: k.source})
	return true
}
