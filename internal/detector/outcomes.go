package detector

import (
	"context"
	"fmt"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
)

// OutcomeDecoder turns one message into an outcome, or says why it never
// can (an error wrapping a *event.FieldError names the field at fault). It
// is what makes the outcome path pluggable: DecodeOutcomeMessage for
// ratelimit.outcomes, or a parser of gateway access logs that yields
// outcomes with deterministic event ids.
type OutcomeDecoder func(event.Message) (event.Outcome, error)

// DecodeOutcomeMessage decodes a ratelimit.outcomes message.
func DecodeOutcomeMessage(m event.Message) (event.Outcome, error) {
	return event.DecodeOutcome(m.Value)
}

// OutcomesGroupSuffix is appended to the detector's consumer group (the
// decisions') to name the group of the outcomes consumer. A group of its
// own keeps the two loops apart: members of one group share its
// generations, so a member joining or leaving either loop would stop both
// while the group rebalances, and kafka-go assigns a reader only the topic
// it reads. Offsets are per topic and group, so the decisions' offsets
// are untouched by the outcomes' and the other way round.
const OutcomesGroupSuffix = "-outcomes"

// OutcomePipeline returns the pipeline of an outcome topic: messages
// decoded by decode (nil: DecodeOutcomeMessage), detected by engine, which
// several sources may share (it keeps their topics' partitions apart).
//
// With checkBans, the pipeline looks up, before detection, whether the
// failure outcomes had their client address or their user banned at their
// time: checkBans sets Outcome.Banned or Outcome.UserBanned on those that
// had, in one round trip for the batch (see BlacklistMarker). It is for
// sources that cannot say so themselves: a gateway's access log records
// the ban's own refusals (403) as failures, which would otherwise feed a
// new ban as soon as the first lapsed. An error of checkBans fails the
// batch, which is delivered again.
func OutcomePipeline(engine *abuse.OutcomeEngine, decode OutcomeDecoder, checkBans func(context.Context, []*event.Outcome) error) Pipeline {
	if decode == nil {
		decode = DecodeOutcomeMessage
	}
	return outcomePipeline{engine: engine, decode: decode, checkBans: checkBans}
}

type outcomePipeline struct {
	engine    *abuse.OutcomeEngine
	decode    OutcomeDecoder
	checkBans func(context.Context, []*event.Outcome) error
}

func (p outcomePipeline) detect(ctx context.Context, msgs []event.Message) ([]abuse.Claimed, abuse.Stats, []rejection, error) {
	in := make([]abuse.OutcomeInput, 0, len(msgs))
	var rejected []rejection
	for _, m := range msgs {
		o, err := p.decode(m)
		if err != nil {
			rejected = append(rejected, rejection{m, err})
			continue
		}
		in = append(in, abuse.OutcomeInput{Topic: m.Topic, Partition: m.Partition, Outcome: o})
	}
	if err := p.markBanned(ctx, in); err != nil {
		return nil, abuse.Stats{}, nil, err
	}
	issued, st, err := p.engine.Process(ctx, in)
	if err != nil {
		return nil, abuse.Stats{}, nil, fmt.Errorf("detect outcomes: %w", err)
	}
	return issued, st, rejected, nil
}

// markBanned marks the failures whose address or user was banned (see
// OutcomePipeline).
func (p outcomePipeline) markBanned(ctx context.Context, in []abuse.OutcomeInput) error {
	if p.checkBans == nil {
		return nil
	}
	var check []*event.Outcome
	for i := range in {
		if o := &in[i].Outcome; o.Status >= 400 && !o.Banned && !o.UserBanned {
			check = append(check, o)
		}
	}
	if len(check) == 0 {
		return nil
	}
	if err := p.checkBans(ctx, check); err != nil {
		return fmt.Errorf("check bans: %w", err)
	}
	return nil
}

func (outcomePipeline) what() (string, string)        { return "outcome", "outcomes" }
func (p outcomePipeline) maxClockSkew() time.Duration { return p.engine.MaxClockSkew() }
func (p outcomePipeline) banReasons() []string        { return p.engine.BanReasons() }
func (p outcomePipeline) warnReasons() []string       { return p.engine.WarnReasons() }
func (outcomePipeline) invalidFields() []string       { return event.InvalidOutcomeFields() }
func (outcomePipeline) outcomes() bool                { return true }
