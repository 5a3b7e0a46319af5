package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

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

// networkFlag is --network: off, on or allow=HOST[:PORT],... (see
// manage.ParseNetworkPolicy). It is a bool flag as it once was: --network
// alone means on, and joinFlagValues lets "--network VALUE" take a value.
type networkFlag struct{ policy manage.NetworkPolicy }

// String renders the policy as --network takes it.
func (n *networkFlag) String() string {
	if n == nil {
		return "off"
	}
	return n.policy.String()
}

// Set parses a policy.
func (n *networkFlag) Set(v string) error {
	p, err := manage.ParseNetworkPolicy(v)
	if err != nil {
		return err
	}
	n.policy = p
	return nil
}

// IsBoolFlag makes --network alone mean on.
func (n *networkFlag) IsBoolFlag() bool { return true }

// joinFlagValues rewrites "--network VALUE" as "--network=VALUE" when VALUE
// is a network policy word (off, on, true, false or allow=…): the flag
// package would otherwise take --network, a bool flag, alone and VALUE as
// an argument. Arguments after "--" are left alone.
func joinFlagValues(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if (a == "--network" || a == "-network") && i+1 < len(args) && isNetworkValue(args[i+1]) {
			out = append(out, a+"="+args[i+1])
			i++
			continue
		}
		out = append(out, a)
	}
	return out
}

func isNetworkValue(v string) bool {
	switch v {
	case "off", "on", "true", "false":
		return true
	}
	return strings.HasPrefix(v, "allow=")
}

// diskSize is the --disk flag: a size (see parseBytes), or off for no disk
// quota at all, held as -1.
type diskSize int64

// diskOff is the value of --disk off.
const diskOff diskSize = -1

// String is the size, or off.
func (d *diskSize) String() string {
	if *d == diskOff {
		return "off"
	}
	return formatBytes(int64(*d))
}

// Set parses a size or off.
func (d *diskSize) Set(v string) error {
	if strings.TrimSpace(v) == "off" {
		*d = diskOff
		return nil
	}
	n, err := parseBytes(v)
	if err != nil {
		return fmt.Errorf("%w, or off", err)
	}
	*d = diskSize(n)
	return nil
}

// bytes is the quota for a provider whose 0 means none: off is 0.
func (d diskSize) bytes() int64 { return max(int64(d), 0) }
