package rlsxds

import (
	"fmt"
	"strings"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// A response is checked on its protobuf encoding before anything is
// decoded from it, against the bounds of an RLS_CONFIG_DIR: at most
// rlsconfig.MaxFiles resources of at most rlsconfig.MaxFileSize bytes,
// rlsconfig.MaxDescriptors descriptors in all, nested at most
// rules.MaxEntries levels, keys, values, domains and names within the
// bounds of package rules, at most rules.MaxReplaces replaces per rate
// limit. What decoding builds is then bounded by what a valid config may
// hold, whatever the response: its size on the wire does not bound it
// (a descriptor nested in another costs 2 bytes there), nor does the
// conversion's work, which depth and long paths would multiply.

// Field numbers of ratelimit.config.ratelimit.v3 and of the discovery
// response.
const (
	fieldConfigName        = 1
	fieldConfigDomain      = 2
	fieldConfigDescriptors = 3

	fieldDescriptorKey         = 1
	fieldDescriptorValue       = 2
	fieldDescriptorRateLimit   = 3
	fieldDescriptorDescriptors = 4

	fieldPolicyName     = 4
	fieldPolicyReplaces = 5
	fieldReplaceName    = 1

	fieldResponseResources = 2
)

// scan walks one resource's encoding: a RateLimitConfig.
type scan struct {
	name string // the resource's, for errors
	// budget is how many more descriptors the response may hold.
	budget *int
	// at is the index of the descriptor being walked at each level, for
	// errors: at[:depth].
	at [rules.MaxEntries]int
}

// config checks the encoded RateLimitConfig b.
func (s *scan) config(b []byte) error {
	top := 0
	return eachField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case fieldConfigDomain:
			return s.text(v, 0, "domain", rules.MaxDomain)
		case fieldConfigDescriptors:
			s.at[0] = top
			top++
			return s.descriptor(v, 1)
		}
		return nil
	})
}

// descriptor checks the encoded RateLimitDescriptor b at depth (1: the
// top level).
func (s *scan) descriptor(b []byte, depth int) error {
	if *s.budget--; *s.budget < 0 {
		return fmt.Errorf("more than %d descriptors in the response (the bound of a configuration)", rlsconfig.MaxDescriptors)
	}
	nested, replaces := 0, 0
	return eachField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case fieldDescriptorKey:
			return s.text(v, depth, "key", rules.MaxDescriptorKey)
		case fieldDescriptorValue:
			return s.text(v, depth, "value", rules.MaxDescriptorValue)
		case fieldDescriptorRateLimit:
			return s.policy(v, depth, &replaces)
		case fieldDescriptorDescriptors:
			if depth == rules.MaxEntries {
				return s.errorf(depth, "descriptors", "nested deeper than %d levels", rules.MaxEntries)
			}
			s.at[depth] = nested
			nested++
			return s.descriptor(v, depth+1)
		}
		return nil
	})
}

// policy checks the encoded RateLimitPolicy b of the descriptor at depth.
// replaces counts the descriptor's replaces: a rate_limit written several
// times is decoded as one, its replaces of every occurrence appended.
func (s *scan) policy(b []byte, depth int, replaces *int) error {
	return eachField(b, func(num protowire.Number, v []byte) error {
		switch num {
		case fieldPolicyName:
			return s.text(v, depth, "rate_limit.name", rules.MaxDescriptorName)
		case fieldPolicyReplaces:
			if *replaces++; *replaces > rules.MaxReplaces {
				return s.errorf(depth, "rate_limit.replaces", "at most %d names", rules.MaxReplaces)
			}
			return eachField(v, func(num protowire.Number, v []byte) error {
				if num == fieldReplaceName {
					return s.text(v, depth, fmt.Sprintf("rate_limit.replaces[%d].name", *replaces-1), rules.MaxDescriptorName)
				}
				return nil
			})
		}
		return nil
	})
}

// text bounds a string field of the descriptor at depth (0: of the
// resource) to max bytes.
func (s *scan) text(v []byte, depth int, field string, max int) error {
	if len(v) > max {
		return s.errorf(depth, field, "at most %d bytes", max)
	}
	return nil
}

// errorf is a problem of field of the descriptor at depth (0: of the
// resource), named by its indexes: descriptors[0].descriptors[2].key.
func (s *scan) errorf(depth int, field, format string, args ...any) error {
	var b strings.Builder
	for _, i := range s.at[:depth] {
		fmt.Fprintf(&b, "descriptors[%d].", i)
	}
	b.WriteString(field)
	return &rlsconfig.Error{File: s.name, Field: b.String(), Reason: fmt.Sprintf(format, args...)}
}

// eachField calls f with the number and content of each length-delimited
// field of the encoded message b, and skips the others. An encoding that
// does not parse is left to the decoder, which refuses it.
func eachField(b []byte, f func(num protowire.Number, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return nil
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}

// nameOf returns the name field of the encoded RateLimitConfig b: the
// last one, as decoding takes it.
func nameOf(b []byte) string {
	var name []byte
	_ = eachField(b, func(num protowire.Number, v []byte) error {
		if num == fieldConfigName {
			name = v
		}
		return nil
	})
	return string(name)
}

// responseCodec decodes the management server's responses as the proto
// codec does, unless one holds more than rlsconfig.MaxFiles resources:
// each would cost about 90 bytes decoded (a 4 MiB response of empty ones,
// 200 MB). Such a response is decoded without its resources, and with one
// of type tooManyType in their place, which Load refuses: the response is
// refused back (NACK) with the reason, as any other invalid one.
type responseCodec struct{ proto encoding.CodecV2 }

func newResponseCodec() responseCodec { return responseCodec{proto: encoding.GetCodecV2("proto")} }

// tooManyType is the type of the resource standing for the resources of a
// response that held too many.
const tooManyType = "type.ratewarden.dev/too-many-resources"

func (c responseCodec) Name() string                           { return c.proto.Name() }
func (c responseCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

func (c responseCodec) Unmarshal(data mem.BufferSlice, v any) error {
	resp, ok := v.(*discoverygrpc.DiscoveryResponse)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	b := data.Materialize()
	if resources := responseFields(b, func([]byte) {}); resources <= rlsconfig.MaxFiles {
		return proto.Unmarshal(b, resp)
	}
	header := make([]byte, 0, 256) // every field but the resources
	responseFields(b, func(field []byte) { header = append(header, field...) })
	if err := proto.Unmarshal(header, resp); err != nil {
		return err
	}
	resp.Resources = []*anypb.Any{{TypeUrl: tooManyType}}
	return nil
}

// responseFields calls other with each field of the encoded
// DiscoveryResponse b but its resources, and returns how many resources it
// holds (up to where it stops parsing: the decoder refuses what follows).
func responseFields(b []byte, other func(field []byte)) (resources int) {
	for len(b) > 0 {
		num, _, n := protowire.ConsumeField(b)
		if n < 0 {
			break
		}
		if num == fieldResponseResources {
			resources++
		} else {
			other(b[:n])
		}
		b = b[n:]
	}
	return resources
}

// tooMany reports whether resources stand for a response that held too
// many (see responseCodec).
func tooMany(resources []*anypb.Any) bool {
	return len(resources) == 1 && resources[0].GetTypeUrl() == tooManyType
}
