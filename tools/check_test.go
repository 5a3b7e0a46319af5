//go:build linux

package tools

import (
	"context"
	"testing"
)

// TestInputErrorReport: a call that fails on its arguments, whether the
// schema or the tool's own check rejects them, is reported with the
// argument; a call that fails on its work, or succeeds, is not.
func TestInputErrorReport(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	for _, tc := range []struct {
		name    string
		tool    string
		args    any
		isError bool
		field   string // the reported argument ("?" for any), "-" for no report
	}{
		{"missing", "workspace_exec", map[string]any{}, true, "command"},
		{"not an object", "workspace_exec", []any{"true"}, true, ""},
		{"unknown", "workspace_exec", map[string]any{"command": "true", "bogus": 1}, true, "?"},
		{"schema type", "workspace_exec", map[string]any{"command": "true", "timeout_sec": "soon"}, true, "timeout_sec"},
		{"tool check", "put_files", map[string]any{"files": []any{map[string]any{"path": "a", "content": "!!", "encoding": "base64"}}}, true, "files[0].content"},
		{"work", "read_files", map[string]any{"paths": []any{"missing.txt"}}, true, "-"},
		{"success", "workspace_exec", map[string]any{"command": "true"}, false, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, report := WithInputErrorReport(context.Background())
			res, err := h.callErr(ctx, tc.tool, tc.args, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError != tc.isError {
				t.Fatalf("isError = %v, want %v: %s", res.IsError, tc.isError, resultText(res))
			}
			got := report.Err()
			switch {
			case tc.field == "-" && got != nil:
				t.Fatalf("reported %v for %s", got, resultText(res))
			case tc.field != "-" && got == nil:
				t.Fatalf("no argument error reported for %s", resultText(res))
			case tc.field != "-" && tc.field != "?" && got.Field != tc.field:
				t.Fatalf("reported field %q, want %q (%v)", got.Field, tc.field, got)
			}
		})
	}
	// Without a report in the context nothing is recorded, and nothing breaks.
	if res := h.call("workspace_exec", map[string]any{}); !res.IsError {
		t.Fatalf("workspace_exec {} succeeded: %s", resultText(res))
	}
}
