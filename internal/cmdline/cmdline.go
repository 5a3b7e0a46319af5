// Package cmdline holds what every sandbox-mcp command line shares: the
// SANDBOX_MCP_* environment mapping of flags, the repeatable KEY=VALUE flag,
// and the --ready-fd announcement. The server's commands and the lean
// sandbox-envd binary both use it, so it imports nothing of the MCP stack.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
)

// EnvName is the environment variable that sets flag name when the command
// line does not: SANDBOX_MCP_ and the name in upper case, dashes as
// underscores (--access-token → SANDBOX_MCP_ACCESS_TOKEN).
func EnvName(name string) string {
	return "SANDBOX_MCP_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// ApplyEnv sets every flag of fs not given on the command line from its
// EnvName variable, as lookup (os.LookupEnv) finds it, so that the command
// line wins. Call it after fs.Parse. Every bad value is reported, each named
// by its variable.
func ApplyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		v, ok := lookup(EnvName(f.Name))
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", EnvName(f.Name), v, err))
		}
	})
	return errors.Join(errs...)
}

// KeyValues is a repeatable KEY=VALUE flag. The zero value is not usable:
// make it with a map literal.
type KeyValues map[string]string

// String lists the pairs sorted by key, separated by commas.
func (m KeyValues) String() string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// Set adds one KEY=VALUE; from the environment, several are separated by
// newlines (values may contain commas). A later value for a key wins.
func (m KeyValues) Set(v string) error {
	for _, item := range strings.FieldsFunc(v, func(r rune) bool { return r == '\n' }) {
		k, val, ok := strings.Cut(item, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q is not KEY=VALUE", item)
		}
		m[k] = val
	}
	return nil
}
