package rules

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// yamlLineRE finds the line number a YAML decoding error starts with,
// possibly after indentation or a "yaml: " prefix.
var yamlLineRE = regexp.MustCompile(`^(\s*)((?:yaml: )?line (\d+):)`)

// nameRulesInDecodeError prefixes each "line N: ..." of a YAML decoding
// error (unknown key, bad duration) with the rule written at line N, as
// validation errors name their rule: `rule "login": line 11: ...`. The
// messages of a type error are joined one per line, as validation's are,
// without the decoder's heading.
func nameRulesInDecodeError(data []byte, err error) error {
	spans := ruleSpans(data)
	var te *yaml.TypeError
	if errors.As(err, &te) {
		errs := make([]error, len(te.Errors))
		for i, e := range te.Errors {
			errs[i] = errors.New(nameRuleAtLine(e, spans))
		}
		return errors.Join(errs...)
	}
	if len(spans) == 0 {
		return err
	}
	if named := nameRuleAtLine(err.Error(), spans); named != err.Error() {
		return errors.New(named)
	}
	return err
}

// nameRuleAtLine prefixes a "line N: ..." message with the rule written at
// line N, keeping its indentation. Messages whose line is outside every
// rule are returned unchanged.
func nameRuleAtLine(msg string, spans []ruleSpan) string {
	m := yamlLineRE.FindStringSubmatchIndex(msg)
	if m == nil {
		return msg
	}
	n, err := strconv.Atoi(msg[m[6]:m[7]])
	if err != nil {
		return msg
	}
	for _, s := range spans {
		if s.first <= n && n <= s.last {
			// A rule that is no mapping is named by its index, which the
			// message may already say: "rules[0]: line 2: rules[0]: want a mapping".
			rest := msg[m[3]:]
			if head := msg[m[4]:m[5]] + " "; strings.HasPrefix(rest, head+s.name+": ") {
				rest = head + rest[len(head)+len(s.name)+2:]
			}
			return msg[:m[3]] + s.name + ": " + rest
		}
	}
	return msg
}

// ruleSpan is the range of lines (inclusive) where a rule is written, and
// the name to report it by.
type ruleSpan struct {
	first, last int
	name        string
}

// ruleSpans returns where each rule of the rules list is written in data,
// or nil when data is not YAML of the expected shape. Rules are named as
// validation names them: rule "<id>", or rules[<index>] without an id.
func ruleSpans(data []byte) []ruleSpan {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		list := root.Content[i+1]
		if root.Content[i].Value != "rules" || list.Kind != yaml.SequenceNode {
			continue
		}
		spans := make([]ruleSpan, 0, len(list.Content))
		for j, item := range list.Content {
			spans = append(spans, ruleSpan{first: item.Line, last: lastLine(item), name: ruleNodeName(item, j)})
		}
		return spans
	}
	return nil
}

// lastLine returns the last line of n's subtree. Aliases are not followed:
// their target is written elsewhere.
func lastLine(n *yaml.Node) int {
	last := n.Line
	for _, c := range n.Content {
		last = max(last, lastLine(c))
	}
	return last
}

// ruleNodeName names the rule at index i of the rules list.
func ruleNodeName(n *yaml.Node, i int) string {
	if n.Kind == yaml.MappingNode {
		for k := 0; k+1 < len(n.Content); k += 2 {
			if v := n.Content[k+1]; n.Content[k].Value == "id" && v.Kind == yaml.ScalarNode && v.Value != "" {
				return fmt.Sprintf("rule %q", v.Value)
			}
		}
	}
	return fmt.Sprintf("rules[%d]", i)
}
