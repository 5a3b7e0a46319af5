package tools

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
	"github.com/sandbox-mcp/sandbox-mcp/manage/egress"
)

// sandboxNetwork is the network policy of sandbox sb: the one its provider
// reports it was made with, else the server's.
func sandboxNetwork(c *Call, sb manage.Sandbox) manage.NetworkPolicy {
	if sb.Network != nil {
		return *sb.Network
	}
	return c.d.Config.Network
}

// networkFailureSigns are what resolvers, curl, wget, Python, pip, npm and
// Go print when a name does not resolve or a connection cannot be made:
// what a command sees in a sandbox without network. Lowercase.
var networkFailureSigns = []string{
	"temporary failure in name resolution",
	"could not resolve host",
	"network is unreachable",
	"getaddrinfo",
	"name or service not known",
	"failed to establish a new connection",
	"no address associated with hostname",
	"unable to resolve host address",
	"eai_again",
	"enotfound",
	"server misbehaving",
}

// refusedTarget finds the destinations the egress proxy's refusals name.
var refusedTarget = regexp.MustCompile(regexp.QuoteMeta(egress.RefusalMarker) + ` (\[[0-9a-fA-F:.]+\]:[0-9]+|[A-Za-z0-9._*-]+:[0-9]+)`)

// proxy403Signs are what clients print when a proxy answers CONNECT with
// 403 without showing its reason (curl). Lowercase.
var proxy403Signs = []string{"connect tunnel failed, response 403", "tunnel connection failed: 403", "received http code 403 from proxy"}

// networkNotice adds a notice to a finished command's result when its
// output (stdout and stderr as shown) suggests the network policy stopped
// it: under off a failed resolve or connect; under allow a refusal of the
// egress proxy, or a failure of a program that went around the proxy.
func networkNotice(c *Call, sb manage.Sandbox, stdout, stderr *string) {
	policy := sandboxNetwork(c, sb)
	var text string
	if stdout != nil {
		text = *stdout
	}
	if stderr != nil {
		text += "\n" + *stderr
	}
	if n := networkNoticeText(policy, text); n != "" {
		c.Notice("%s", n)
	}
}

// networkNoticeText is the notice for output under policy ("" for none).
func networkNoticeText(policy manage.NetworkPolicy, output string) string {
	if policy.IsOn() {
		return ""
	}
	lower := strings.ToLower(output)
	failed := false
	for _, s := range networkFailureSigns {
		failed = failed || strings.Contains(lower, s)
	}
	if policy.IsOff() {
		if !failed {
			return ""
		}
		return "This sandbox has no network access (network policy: off), so name resolution and connections fail. " +
			"Only the operator can change that, by starting the server with --network on, or --network allow=HOST[:PORT],... to allow only some hosts (for example a package index). " +
			"Until then, work offline (packages or files already in the workspace, or brought in with stage_inputs)."
	}
	allowed := policy.AllowList()
	var targets []string
	for _, m := range refusedTarget.FindAllStringSubmatch(output, -1) {
		if len(targets) < 5 && !contains(targets, m[1]) {
			targets = append(targets, m[1])
		}
	}
	if len(targets) > 0 {
		return fmt.Sprintf("The sandbox's egress proxy refused %s: the network policy allows only %s. "+
			"Other destinations are refused; only the operator can add hosts (--network allow=...).", strings.Join(targets, ", "), allowed)
	}
	for _, s := range proxy403Signs {
		if strings.Contains(lower, s) {
			return fmt.Sprintf("A connection was refused by the sandbox's egress proxy (HTTP 403): the network policy allows only %s. "+
				"Other destinations are refused; only the operator can add hosts (--network allow=...).", allowed)
		}
	}
	if failed {
		return fmt.Sprintf("This sandbox has no direct network: it reaches only %s, through the HTTP proxy that HTTP_PROXY and HTTPS_PROXY name. "+
			"A program that ignores those variables, or resolves names itself, cannot connect.", allowed)
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// networkPolicyLine is the instructions' sentence on the network.
func networkPolicyLine(policy manage.NetworkPolicy) string {
	switch {
	case policy.IsOn():
		return "Network: the sandbox has outbound network access."
	case policy.IsAllow():
		return "Network: the sandbox reaches only " + policy.AllowList() + " (a host without a port: ports 80 and 443), through an HTTP proxy set in HTTP_PROXY and HTTPS_PROXY (pip, curl, npm and most tools use it); every other destination is refused with HTTP 403. Only the operator can change the list."
	default:
		return "Network: the sandbox has no network access (no DNS, no connections out): installs from the internet fail, so use what is in the workspace or staged in. Only the operator can enable it (--network)."
	}
}

// workspaceNetwork is workspace_info's view of the network policy.
type workspaceNetwork struct {
	Mode  string   `json:"mode" jsonschema_description:"off (no network), on (unrestricted), or allow (only the hosts in allow, through an HTTP proxy set in HTTP_PROXY and HTTPS_PROXY)."`
	Allow []string `json:"allow,omitempty" jsonschema_description:"Under allow: the permitted destinations, HOST or HOST:PORT (a host without a port: ports 80 and 443)."`
}

// newWorkspaceNetwork describes policy for workspace_info.
func newWorkspaceNetwork(policy manage.NetworkPolicy) workspaceNetwork {
	n := workspaceNetwork{Mode: string(manage.NetworkOff)}
	switch {
	case policy.IsOn():
		n.Mode = string(manage.NetworkOn)
	case policy.IsAllow():
		n.Mode = string(manage.NetworkAllow)
		for _, h := range policy.Allow {
			n.Allow = append(n.Allow, h.String())
		}
	}
	return n
}

// String renders the network line of workspace_info's text.
func (n workspaceNetwork) String() string {
	if n.Mode == string(manage.NetworkAllow) {
		return "allow " + strings.Join(n.Allow, ", ") + " (through an HTTP proxy; everything else refused)"
	}
	return n.Mode
}

// networkMismatch warns when sandbox sb was made with another network
// policy than the server's (a named workspace kept from an earlier run):
// the sandbox keeps its own, and the server's applies to new ones.
func networkMismatch(sb manage.Sandbox, server manage.NetworkPolicy) string {
	if sb.Network == nil || sb.Network.String() == server.String() {
		return ""
	}
	return fmt.Sprintf("This sandbox was made with network policy %s; the server's is now %s, which applies to new sandboxes (workspace_reset makes one).", sb.Network, server)
}
