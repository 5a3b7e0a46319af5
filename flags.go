package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// envName is the environment variable that sets flag name:
// SANDBOX_MCP_ and the name in upper case, dashes as underscores.
func envName(name string) string {
	return "SANDBOX_MCP_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// applyEnv sets every flag not given on the command line from its
// SANDBOX_MCP_* variable, so that the command line wins. Every bad value is
// reported, each named by its variable.
func applyEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		v, ok := lookup(envName(f.Name))
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
		}
	})
	return errors.Join(errs...)
}

// stringMap is a repeatable KEY=VALUE flag.
type stringMap map[string]string

// String lists the pairs sorted by key, separated by commas.
func (m stringMap) String() string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

// Set adds one KEY=VALUE; from the environment, several are separated by
// newlines (values may contain commas).
func (m stringMap) Set(v string) error {
	for _, item := range strings.FieldsFunc(v, func(r rune) bool { return r == '\n' }) {
		k, val, ok := strings.Cut(item, "=")
		if !ok || k == "" {
			return fmt.Errorf("%q is not KEY=VALUE", item)
		}
		m[k] = val
	}
	return nil
}

// byteSize is a size flag: 4096, 32KiB, 1MiB, 2GiB, 64MB, 1kB.
type byteSize int64

// String is the size in the largest binary unit that divides it.
func (b *byteSize) String() string { return formatBytes(int64(*b)) }

// Set parses a size (see parseBytes).
func (b *byteSize) Set(v string) error {
	n, err := parseBytes(v)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

// byteUnits are the suffixes parseBytes knows, longest first where one
// ends another ("KiB" before "B").
var byteUnits = []struct {
	suffix string
	mult   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"kB", 1000}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"B", 1}}

// parseBytes parses a non-negative whole number of bytes with an optional
// unit (KiB, MiB, GiB, kB or KB, MB, GB, B), refusing one that overflows
// int64.
func parseBytes(v string) (int64, error) {
	s := strings.TrimSpace(v)
	mult := int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (examples: 4096, 32KiB, 1MiB)", v)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large (at most %d bytes)", v, int64(math.MaxInt64))
	}
	return n * mult, nil
}

// formatBytes writes n in GiB, MiB or KiB when one divides it, else in
// bytes.
func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.FormatInt(n, 10)
}
