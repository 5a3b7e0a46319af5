package search

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Command is the first argument that selects the search mode of the lean
// envd: `sandbox-envd search --root DIR --pattern RE [flags]`.
const Command = "search"

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// Main runs the search mode with args (after "search"), writing records to
// stdout and usage errors to stderr. It returns the exit status: 0 after a
// search (whatever it found), 2 for a bad command line, 1 when the search
// could not run.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("search", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	var include, exclude stringList
	fs.StringVar(&o.Root, "root", "", "the directory nothing outside of which is read (required)")
	fs.StringVar(&o.Dir, "dir", "", "the directory to search, relative to --root (default: the root)")
	fs.StringVar(&o.Pattern, "pattern", "", "the Go RE2 regular expression (required)")
	fs.BoolVar(&o.Literal, "literal", false, "match the pattern as a literal string")
	fs.BoolVar(&o.IgnoreCase, "ignore-case", false, "match case-insensitively")
	fs.Var(&include, "include", "search only files matching this glob (repeatable)")
	fs.Var(&exclude, "exclude", "skip files and directories matching this glob (repeatable)")
	fs.IntVar(&o.Context, "context", 0, "lines of context before and after each match (at most 20)")
	fs.IntVar(&o.MaxMatches, "max-matches", DefaultMaxMatches, "matching lines to report at most")
	fs.Int64Var(&o.MaxBytes, "max-bytes", DefaultMaxBytes, "bytes of line text to report at most")
	fs.Int64Var(&o.MaxFiles, "max-files", DefaultMaxFiles, "files to scan at most")
	fs.DurationVar(&o.Timeout, "timeout", DefaultTimeout, "how long the search may take")
	fs.IntVar(&o.MaxLineBytes, "max-line-bytes", DefaultMaxLineBytes, "bytes shown of each line at most")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "search: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if o.Root == "" || o.Pattern == "" {
		fmt.Fprintln(stderr, "search: --root and --pattern are required")
		return 2
	}
	o.Include, o.Exclude = include, exclude
	if err := Run(ctx, o, stdout); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
