package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// toolsCommand is `sandbox-mcp tools`: the tools the options select, as the
// model sees them, for people (the default), machines (--json) or the
// README (--markdown). It needs no sandbox.
func toolsCommand(fs *flag.FlagSet, g *globals) func(context.Context, []string) error {
	o := &serveOptions{}
	o.registerSandboxFlags(fs)
	asJSON := fs.Bool("json", false, "print machine-readable JSON (names, titles, descriptions, toolsets, annotations, input and output schemas)")
	markdown := fs.Bool("markdown", false, "print the README's tool table")
	return func(ctx context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		d := tools.NewDeps(nil, o.toolsConfig(), g.log)
		selected, err := tools.Selected(d)
		if err != nil {
			return err
		}
		switch {
		case *asJSON:
			enc := json.NewEncoder(g.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(tools.Describe(selected))
		case *markdown:
			_, err := io.WriteString(g.stdout, tools.MarkdownTable(selected))
			return err
		}
		writeToolsText(g.stdout, tools.Describe(selected), tools.Instructions(d.Config))
		return nil
	}
}

// writeToolsText prints each tool's name, title, toolset, annotations,
// description and schemas, then the server instructions.
func writeToolsText(w io.Writer, descs []tools.Description, instructions string) {
	for i, desc := range descs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		a := desc.Annotations
		fmt.Fprintf(w, "%s — %s  [toolset %s; readOnly=%v destructive=%v idempotent=%v openWorld=%v]\n",
			desc.Name, desc.Title, desc.Toolset, a.ReadOnly, a.Destructive, a.Idempotent, a.OpenWorld)
		fmt.Fprintf(w, "\n%s\n\ninput schema:\n%s\noutput schema:\n%s\n", wrap(desc.Description, 100), indentJSON(desc.InputSchema), indentJSON(desc.OutputSchema))
	}
	fmt.Fprintf(w, "\nserver instructions:\n%s\n", wrap(instructions, 100))
}

// indentJSON indents raw JSON by two spaces for printing under a heading;
// raw that is not JSON is returned as is.
func indentJSON(raw []byte) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "  ", "  "); err != nil {
		return string(raw)
	}
	return "  " + b.String()
}

// wrap breaks text into lines of at most width characters, keeping
// paragraphs.
func wrap(text string, width int) string {
	var out []string
	for _, para := range strings.Split(text, "\n") {
		line := ""
		for _, w := range strings.Fields(para) {
			if line != "" && len(line)+1+len(w) > width {
				out = append(out, line)
				line = w
				continue
			}
			if line != "" {
				line += " "
			}
			line += w
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}
