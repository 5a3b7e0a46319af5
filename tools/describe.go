package tools

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Description is what the model sees of one tool, for people and machines
// (sandbox-mcp tools), with its toolset. Its JSON uses MCP's names; the exact
// definition the client receives is the JSON of Tool.Def.
type Description struct {
	Name         string          `json:"name"`
	Title        string          `json:"title"`
	Toolset      string          `json:"toolset"`
	Description  string          `json:"description"`
	Annotations  Annotations     `json:"annotations"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
}

// Describe returns the descriptions of ts, in order.
func Describe(ts []Tool) []Description {
	out := make([]Description, 0, len(ts))
	for _, t := range ts {
		a := t.Def.Annotations
		out = append(out, Description{
			Name:        t.Def.Name,
			Title:       t.Def.Title,
			Toolset:     t.Toolset,
			Description: t.Def.Description,
			Annotations: Annotations{
				ReadOnly:    deref(a.ReadOnlyHint),
				Destructive: deref(a.DestructiveHint),
				Idempotent:  deref(a.IdempotentHint),
				OpenWorld:   deref(a.OpenWorldHint),
			},
			InputSchema:  t.Def.RawInputSchema,
			OutputSchema: t.Def.RawOutputSchema,
		})
	}
	return out
}

func deref(b *bool) bool { return b != nil && *b }

// MarkdownTable renders ts as the README's tool table: name, toolset, what
// it does (the first sentence of its description) and its hints.
func MarkdownTable(ts []Tool) string {
	var b strings.Builder
	b.WriteString("| tool | toolset | what it does | hints |\n| --- | --- | --- | --- |\n")
	for _, d := range Describe(ts) {
		var hints []string
		if d.Annotations.ReadOnly {
			hints = append(hints, "read-only")
		} else {
			if d.Annotations.Destructive {
				hints = append(hints, "destructive")
			}
			if d.Annotations.Idempotent {
				hints = append(hints, "idempotent")
			}
		}
		if d.Annotations.OpenWorld {
			hints = append(hints, "open-world")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", d.Name, d.Toolset, firstSentence(d.Description), strings.Join(hints, ", "))
	}
	return b.String()
}

// firstSentence returns text up to the end of its first sentence.
func firstSentence(text string) string {
	text = strings.Join(strings.Fields(text), " ")
	for i := 0; i+1 < len(text); i++ {
		if (text[i] == '.' || text[i] == '!' || text[i] == '?') && text[i+1] == ' ' {
			return text[:i+1]
		}
	}
	return text
}
