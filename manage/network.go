package manage

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// NetworkMode is how much of the network a sandbox reaches.
type NetworkMode string

// The network modes.
const (
	// NetworkOff: no network at all (the default).
	NetworkOff NetworkMode = "off"
	// NetworkOn: unrestricted outbound network.
	NetworkOn NetworkMode = "on"
	// NetworkAllow: only the hosts of NetworkPolicy.Allow, through a
	// filtering proxy on the host (HTTP CONNECT and plain HTTP).
	NetworkAllow NetworkMode = "allow"
)

// DefaultAllowPorts are the ports an allow entry without a port permits:
// HTTP's and HTTPS's.
var DefaultAllowPorts = []uint16{80, 443}

// HostPort is one destination an allow policy permits: a host name (or a
// "*." wildcard of its subdomains) or an IP address, and a port (0: the
// DefaultAllowPorts).
type HostPort struct {
	// Host is a lowercase host name without a trailing dot, "*.name" for
	// every subdomain of name, or an IP address (IPv6 without brackets).
	Host string `json:"host"`
	// Port is the port, or 0 for DefaultAllowPorts.
	Port uint16 `json:"port,omitempty"`
}

// String renders h as it is written in a policy ("pypi.org", "[::1]:8080").
func (h HostPort) String() string {
	host := h.Host
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if h.Port == 0 {
		return host
	}
	return host + ":" + strconv.Itoa(int(h.Port))
}

// IP returns the address h names when its host is an IP literal.
func (h HostPort) IP() (netip.Addr, bool) {
	a, err := netip.ParseAddr(h.Host)
	return a, err == nil
}

// Matches reports whether a request for host (a name or an IP literal,
// lowercase, no brackets) and port is one h permits.
func (h HostPort) Matches(host string, port uint16) bool {
	if h.Port == 0 {
		if !slices.Contains(DefaultAllowPorts, port) {
			return false
		}
	} else if h.Port != port {
		return false
	}
	if a, ok := h.IP(); ok {
		b, err := netip.ParseAddr(host)
		return err == nil && a.Unmap() == b.Unmap()
	}
	if suffix, ok := strings.CutPrefix(h.Host, "*."); ok {
		return strings.HasSuffix(host, "."+suffix)
	}
	return h.Host == host
}

// NetworkPolicy is a sandbox's network access: off (the zero value), on, or
// allow with the destinations it permits.
type NetworkPolicy struct {
	// Mode is the policy's mode; "" means NetworkOff.
	Mode NetworkMode `json:"mode,omitempty"`
	// Allow are the permitted destinations under NetworkAllow (empty
	// otherwise).
	Allow []HostPort `json:"allow,omitempty"`
}

// NetworkPolicyOn is the policy of unrestricted network access.
func NetworkPolicyOn() NetworkPolicy { return NetworkPolicy{Mode: NetworkOn} }

// IsOff reports whether the sandbox has no network.
func (p NetworkPolicy) IsOff() bool { return p.Mode == "" || p.Mode == NetworkOff }

// IsOn reports whether the sandbox has unrestricted network access.
func (p NetworkPolicy) IsOn() bool { return p.Mode == NetworkOn }

// IsAllow reports whether the sandbox reaches only an allow list.
func (p NetworkPolicy) IsAllow() bool { return p.Mode == NetworkAllow }

// AllowList renders the allow list as written ("pypi.org,127.0.0.1:8080").
func (p NetworkPolicy) AllowList() string {
	parts := make([]string, len(p.Allow))
	for i, h := range p.Allow {
		parts[i] = h.String()
	}
	return strings.Join(parts, ",")
}

// String renders p as --network takes it: "off", "on" or "allow=…".
func (p NetworkPolicy) String() string {
	switch {
	case p.IsOn():
		return "on"
	case p.IsAllow():
		return "allow=" + p.AllowList()
	default:
		return "off"
	}
}

// Permits reports whether a request for host and port is on the allow list
// (always for NetworkOn, never for NetworkOff).
func (p NetworkPolicy) Permits(host string, port uint16) bool {
	switch {
	case p.IsOn():
		return true
	case p.IsAllow():
		for _, h := range p.Allow {
			if h.Matches(host, port) {
				return true
			}
		}
	}
	return false
}

// Check reports a policy ParseNetworkPolicy would not have produced.
func (p NetworkPolicy) Check() error {
	switch p.Mode {
	case "", NetworkOff, NetworkOn:
		if len(p.Allow) > 0 {
			return fmt.Errorf("network policy %q has an allow list", p.Mode)
		}
		return nil
	case NetworkAllow:
		if len(p.Allow) == 0 {
			return errors.New("network policy allow: the allow list is empty")
		}
		for _, h := range p.Allow {
			got, err := ParseHostPort(h.String())
			if err != nil {
				return err
			}
			if got != h {
				return fmt.Errorf("network policy allow: %q is not in canonical form (%q)", h.String(), got.String())
			}
		}
		return nil
	default:
		return fmt.Errorf("network mode %q: want off, on or allow", p.Mode)
	}
}

// ParseNetworkPolicy parses --network's value: "off", "on" (also "true",
// "false" and the empty string for off, as the flag was once a bool) or
// "allow=HOST[:PORT],…", HOST a name, "*.name" or an IP address ("[…]" for
// IPv6), PORT 1 to 65535 (none: 80 and 443).
func ParseNetworkPolicy(s string) (NetworkPolicy, error) {
	switch strings.TrimSpace(s) {
	case "", "off", "false", "0":
		return NetworkPolicy{Mode: NetworkOff}, nil
	case "on", "true", "1":
		return NetworkPolicyOn(), nil
	}
	list, ok := strings.CutPrefix(strings.TrimSpace(s), "allow=")
	if !ok {
		return NetworkPolicy{}, fmt.Errorf("network policy %q: want off, on or allow=HOST[:PORT][,HOST[:PORT]]", s)
	}
	p := NetworkPolicy{Mode: NetworkAllow}
	seen := map[HostPort]bool{}
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		h, err := ParseHostPort(item)
		if err != nil {
			return NetworkPolicy{}, fmt.Errorf("network policy allow: %w", err)
		}
		if !seen[h] {
			seen[h] = true
			p.Allow = append(p.Allow, h)
		}
	}
	if len(p.Allow) == 0 {
		return NetworkPolicy{}, errors.New("network policy allow: the allow list is empty (want allow=HOST[:PORT],...)")
	}
	return p, nil
}

// ParseHostPort parses one allow entry, HOST[:PORT].
func ParseHostPort(s string) (HostPort, error) {
	host, portText := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return HostPort{}, fmt.Errorf("%q: unclosed [ in an IPv6 address", s)
		}
		host, portText = s[1:end], s[end+1:]
		if portText != "" {
			var ok bool
			if portText, ok = strings.CutPrefix(portText, ":"); !ok {
				return HostPort{}, fmt.Errorf("%q: want [IPv6]:PORT", s)
			}
			if portText == "" {
				return HostPort{}, fmt.Errorf("%q: empty port", s)
			}
		}
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() || a.Zone() != "" {
			return HostPort{}, fmt.Errorf("%q: %q is not an IPv6 address", s, host)
		}
	case strings.Count(s, ":") > 1:
		return HostPort{}, fmt.Errorf("%q: write an IPv6 address in brackets, [ADDR] or [ADDR]:PORT", s)
	case strings.Contains(s, ":"):
		host, portText, _ = strings.Cut(s, ":")
		if portText == "" {
			return HostPort{}, fmt.Errorf("%q: empty port", s)
		}
	}
	var h HostPort
	if portText != "" {
		n, err := strconv.Atoi(portText)
		if err != nil || n < 1 || n > 65535 {
			return HostPort{}, fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, portText)
		}
		h.Port = uint16(n)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return HostPort{}, fmt.Errorf("%q: addresses with a zone are not supported", s)
		}
		h.Host = a.Unmap().String()
		return h, nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	check := strings.TrimPrefix(name, "*.")
	if err := checkHostName(check); err != nil {
		return HostPort{}, fmt.Errorf("%q: %w", s, err)
	}
	if net.ParseIP(check) != nil || allDigitsAndDots(check) {
		return HostPort{}, fmt.Errorf("%q: %q is neither a host name nor an IP address", s, host)
	}
	h.Host = name
	return h, nil
}

// checkHostName checks name against the DNS's rules for host names: labels
// of letters, digits and hyphens (no hyphen first or last), each 1 to 63
// characters, 253 in all.
func checkHostName(name string) error {
	if name == "" {
		return errors.New("empty host")
	}
	if len(name) > 253 {
		return errors.New("host name longer than 253 characters")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("host name %q has an empty or too long label", name)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("host name %q has a label that begins or ends with a hyphen", name)
		}
		for _, r := range label {
			if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '_' {
				return fmt.Errorf("host name %q has the character %q (want letters, digits, hyphens and dots)", name, r)
			}
		}
	}
	return nil
}

// allDigitsAndDots reports a name like "1.2.3" or "999.1.1.1", which
// resolvers may read as an address: refused as a name.
func allDigitsAndDots(s string) bool {
	return strings.Trim(s, "0123456789.") == ""
}

// UnmarshalJSON reads a policy, and also the bool the field once was (in
// sandbox records made before policies existed).
func (p *NetworkPolicy) UnmarshalJSON(data []byte) error {
	var on bool
	if err := json.Unmarshal(data, &on); err == nil {
		*p = NetworkPolicy{Mode: NetworkOff}
		if on {
			*p = NetworkPolicyOn()
		}
		return nil
	}
	type plain NetworkPolicy
	var q plain
	if err := json.Unmarshal(data, &q); err != nil {
		return err
	}
	*p = NetworkPolicy(q)
	return nil
}
