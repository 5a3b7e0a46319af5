package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/sandbox-mcp/sandbox-mcp/server"
	"github.com/sandbox-mcp/sandbox-mcp/tools"
)

// callCommand is `sandbox-mcp call TOOL [JSON | @FILE | -]`: one tool call
// through a real in-process MCP session, printing what the model sees
// (progress on stderr). It exits 1 for an isError result, and 2 for a call
// to fix: a usage error, an unknown tool, arguments that are not one JSON
// object, or arguments the tool rejected (then with its input schema).
func callCommand(fs *flag.FlagSet, g *globals) func(context.Context, []string) error {
	o := &serveOptions{}
	o.registerSandboxFlags(fs)
	asJSON := fs.Bool("json", false, "print the whole result as JSON (content, structuredContent, isError)")
	return func(ctx context.Context, args []string) error {
		if len(args) < 1 || len(args) > 2 {
			fs.Usage()
			return exitError{2}
		}
		name, raw := args[0], "{}"
		if len(args) == 2 {
			var err error
			if raw, err = readCallArgs(args[1]); err != nil {
				return callUsageError(g, "%v", err)
			}
		}
		// The stack creates no sandbox before the call: a typo or bad JSON
		// costs nothing but opening the state directory.
		st, err := o.build(ctx, g.log, server.Config{})
		if err != nil {
			return err
		}
		defer st.close(context.Background())
		schema, err := inputSchema(st.tools, name)
		if err != nil {
			return callUsageError(g, "%v", err)
		}
		arguments, err := decodeCallArgs(raw)
		if err != nil {
			return callUsageError(g, "the arguments must be one JSON object: %v\n\n%s input schema:\n%s", err, name, indentJSON(schema))
		}
		ctx, badArgs := tools.WithInputErrorReport(ctx)
		res, err := callInProcess(ctx, st.server, name, arguments, g.stderr)
		if err != nil {
			return err
		}
		if err := printResult(g.stdout, res, *asJSON); err != nil {
			return err
		}
		switch {
		case !res.IsError:
			return nil
		case badArgs.Err() != nil:
			fmt.Fprintf(g.stderr, "\n%s input schema:\n%s\n", name, indentJSON(schema))
			return exitError{2}
		}
		return exitError{1}
	}
}

// callUsageError prints a call the user should fix and exits 2.
func callUsageError(g *globals, format string, args ...any) error {
	fmt.Fprintf(g.stderr, "sandbox-mcp call: "+format+"\n", args...)
	return exitError{2}
}

// readCallArgs reads call's argument: literal JSON, @FILE, or - for stdin.
func readCallArgs(arg string) (string, error) {
	switch {
	case arg == "-":
		b, err := io.ReadAll(os.Stdin)
		return string(b), err
	case strings.HasPrefix(arg, "@"):
		b, err := os.ReadFile(arg[1:])
		if err != nil {
			return "", fmt.Errorf("reading arguments: %w", err)
		}
		return string(b), nil
	}
	return arg, nil
}

// inputSchema returns the input schema of the served tool called name; for
// a tool not served, the error lists those that are.
func inputSchema(served []tools.Tool, name string) (json.RawMessage, error) {
	names := make([]string, 0, len(served))
	for _, tl := range served {
		if tl.Def.Name == name {
			return tl.Def.RawInputSchema, nil
		}
		names = append(names, tl.Def.Name)
	}
	return nil, fmt.Errorf("unknown tool %q; the tools are: %s", name, strings.Join(names, ", "))
}

// decodeCallArgs decodes the arguments as one JSON object, numbers kept as
// written. Whether they suit the tool is the tool's to say.
func decodeCallArgs(raw string) (map[string]any, error) {
	var arguments map[string]any
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&arguments); err != nil {
		return nil, err
	}
	if arguments == nil {
		return nil, errors.New("got null")
	}
	return arguments, nil
}

// callInProcess opens an in-process MCP session with srv, calls tool name
// with a progress token, and prints the progress messages to progress.
func callInProcess(ctx context.Context, srv *server.Server, name string, arguments map[string]any, progress io.Writer) (*mcp.CallToolResult, error) {
	c, err := mcpclient.NewInProcessClient(srv.MCP())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method == string(mcp.MethodNotificationProgress) {
			if msg, ok := n.Params.AdditionalFields["message"].(string); ok {
				fmt.Fprintf(progress, "progress: %s\n", msg)
			}
		}
	})
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	initReq := mcp.InitializeRequest{}
	initReq.Params.ProtocolVersion = mcp.ProtocolVersion20251125
	initReq.Params.ClientInfo = mcp.Implementation{Name: "sandbox-mcp call", Version: buildVersion()}
	if _, err := c.Initialize(ctx, initReq); err != nil {
		return nil, err
	}
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = arguments
	req.Params.Meta = &mcp.Meta{ProgressToken: "call"}
	res, err := c.CallTool(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return res, nil
}

// printResult prints the result's content, text as is and an image as a
// one-line summary, or with asJSON the whole result.
func printResult(w io.Writer, res *mcp.CallToolResult, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	for _, content := range res.Content {
		switch ct := content.(type) {
		case mcp.TextContent:
			fmt.Fprintln(w, ct.Text)
		case mcp.ImageContent:
			fmt.Fprintf(w, "[image %s, %d bytes of base64]\n", ct.MIMEType, len(ct.Data))
		default:
			raw, _ := json.Marshal(ct)
			fmt.Fprintln(w, string(raw))
		}
	}
	return nil
}
