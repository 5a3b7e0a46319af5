//go:build linux

package main

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/manage/egress"
)

// egressResult is what `sandbox-mcp call --json` prints.
type egressResult struct {
	Content []struct {
		Text string `json:"text"`
	} `json:"content"`
	Structured struct {
		Notices  []string `json:"notices"`
		ExitCode *int     `json:"exit_code"`
		Stdout   string   `json:"stdout"`
		Stderr   string   `json:"stderr"`
		Network  *struct {
			Mode  string   `json:"mode"`
			Allow []string `json:"allow"`
		} `json:"network"`
	} `json:"structuredContent"`
	IsError bool `json:"isError"`
}

func (r egressResult) notices() string { return strings.Join(r.Structured.Notices, "\n") }

// networkNotices are the result's notices about the network (not, for
// example, that the sandbox was restarted, as each call is a new server).
func (r egressResult) networkNotices() []string {
	var out []string
	for _, n := range r.Structured.Notices {
		if strings.Contains(n, "network") {
			out = append(out, n)
		}
	}
	return out
}

// egressCall runs `sandbox-mcp call --json --isolation bwrap --workspace WS
// flags… TOOL ARGS` for n and returns the result.
func egressCall(t *testing.T, n *newcomer, workspace, flags, tool string, args any) egressResult {
	t.Helper()
	line, out := runBwrapCall(t, n, "--json --workspace "+workspace+" "+flags, tool, args)
	var res egressResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%s: %v in %q", line, err, out)
	}
	return res
}

// egressExec runs command in the sandbox and returns the result.
func egressExec(t *testing.T, n *newcomer, workspace, flags, command string) egressResult {
	t.Helper()
	return egressCall(t, n, workspace, flags, "workspace_exec", map[string]any{"command": command})
}

// packageIndex serves a PEP 503 simple index on loopback holding one small
// wheel, tinypkg 0.1, and /whoami, which answers with the Host it got. It
// returns the index's host:port.
func packageIndex(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	wheel := "tinypkg-0.1-py3-none-any.whl"
	for _, d := range []string{"simple/tinypkg", "files"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeWheel(t, filepath.Join(dir, "files", wheel))
	pages := map[string]string{
		"simple/index.html":         `<html><body><a href="tinypkg/">tinypkg</a></body></html>`,
		"simple/tinypkg/index.html": fmt.Sprintf(`<html><body><a href="../../files/%s">%s</a></body></html>`, wheel, wheel),
	}
	for name, body := range pages {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/", http.FileServer(http.Dir(dir)))
	mux.HandleFunc("/whoami", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "index saw Host %s", r.Host) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// writeWheel writes a minimal pure-Python wheel of tinypkg 0.1 at path.
func writeWheel(t *testing.T, path string) {
	t.Helper()
	files := [][2]string{
		{"tinypkg/__init__.py", "VALUE = 42\n"},
		{"tinypkg-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n"},
		{"tinypkg-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: sandbox-mcp-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	for _, f := range files {
		sum := sha256.Sum256([]byte(f[1]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f[0], base64.RawURLEncoding.EncodeToString(sum[:]), len(f[1]))
	}
	record.WriteString("tinypkg-0.1.dist-info/RECORD,,\n")
	files = append(files, [2]string{"tinypkg-0.1.dist-info/RECORD", record.String()})
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(out)
	for _, f := range files {
		w, err := zw.Create(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(f[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// otherLoopbackPort is a listening loopback port other than the index's.
func otherLoopbackPort(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "OTHER SERVICE") }))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// A sandbox under --network allow=127.0.0.1:PORT downloads a package from
// a local index with pip through the egress proxy; every other destination
// (another loopback port, a public address, a name) is refused with 403,
// and the result's notice names it and the allowed list.
func TestNetworkAllowPipDownloadsFromALocalIndex(t *testing.T) {
	n := newNewcomer(t)
	index := packageIndex(t)
	other := otherLoopbackPort(t)
	flags := "--network allow=" + index
	info := egressCall(t, n, "egress", flags, "workspace_info", map[string]any{})
	if nw := info.Structured.Network; nw == nil || nw.Mode != "allow" || len(nw.Allow) != 1 || nw.Allow[0] != index {
		t.Fatalf("workspace_info network: %+v", info.Structured.Network)
	}
	if !strings.Contains(info.Content[0].Text, "network: allow "+index) {
		t.Errorf("workspace_info text lacks the policy:\n%s", info.Content[0].Text)
	}

	havePip := egressExec(t, n, "egress", flags, "python3 -m pip --version")
	if *havePip.Structured.ExitCode == 0 {
		res := egressExec(t, n, "egress", flags, "python3 -m pip download --no-cache-dir --disable-pip-version-check --index-url http://"+index+"/simple tinypkg -d dl && ls dl")
		if *res.Structured.ExitCode != 0 || !strings.Contains(res.Structured.Stdout, "tinypkg-0.1-py3-none-any.whl\n") {
			t.Fatalf("pip download: exit %d\nstdout: %s\nstderr: %s", *res.Structured.ExitCode, res.Structured.Stdout, res.Structured.Stderr)
		}
		if ns := res.networkNotices(); len(ns) != 0 {
			t.Errorf("pip download: unexpected notices %q", ns)
		}
	} else {
		t.Logf("no pip in the sandbox (%s): fetching the wheel with python3's urllib through the proxy instead", havePip.Structured.Stderr)
		res := egressExec(t, n, "egress", flags, `python3 -c 'import urllib.request as u; print(len(u.urlopen("http://`+index+`/files/tinypkg-0.1-py3-none-any.whl").read()) > 0)'`)
		if strings.TrimSpace(res.Structured.Stdout) != "True" {
			t.Fatalf("urllib through the proxy: %+v", res.Structured)
		}
	}

	for _, c := range []struct {
		name, command, refused string
	}{
		{"another loopback port", "curl -sS http://" + other + "/", other},
		{"a public address over CONNECT", "curl -sS -m 20 https://1.1.1.1/", ""},
		{"a name, with python", `python3 -c 'import urllib.request as u; u.urlopen("https://example.com/")'`, "example.com:443"},
	} {
		res := egressExec(t, n, "egress", flags, c.command)
		out := res.Structured.Stdout + res.Structured.Stderr
		if strings.Contains(out, "OTHER SERVICE") {
			t.Errorf("%s: the request went through: %s", c.name, out)
		}
		notice := res.notices()
		if !strings.Contains(notice, "allows only "+index) {
			t.Errorf("%s: notice %q does not name the allowed list\noutput: %s", c.name, notice, out)
		}
		if c.refused != "" && !strings.Contains(notice, "refused "+c.refused) {
			t.Errorf("%s: notice %q does not name %s\noutput: %s", c.name, notice, c.refused, out)
		}
		if c.refused == "" && !strings.Contains(notice, "HTTP 403") && !strings.Contains(notice, "refused") {
			t.Errorf("%s: notice %q does not say the proxy refused\noutput: %s", c.name, notice, out)
		}
	}
}

// Under the default policy (off) a command that fails to resolve a name
// gets a notice saying the sandbox has no network and how the operator
// enables it; a command that does not touch the network gets none.
func TestNetworkOffNotice(t *testing.T) {
	n := newNewcomer(t)
	for _, command := range []string{
		"curl -sS -m 10 http://example.com/",
		`python3 -c 'import urllib.request as u; u.urlopen("http://example.com/")'`,
	} {
		res := egressExec(t, n, "off", "", command)
		if notice := res.notices(); !strings.Contains(notice, "no network access") || !strings.Contains(notice, "--network") {
			t.Errorf("%s: notices %q; want the no-network notice\nstderr: %s", command, notice, res.Structured.Stderr)
		}
	}
	if res := egressExec(t, n, "off", "", "echo quiet"); len(res.networkNotices()) != 0 {
		t.Errorf("echo: unexpected notices %q", res.networkNotices())
	}
	info := egressCall(t, n, "off", "", "workspace_info", map[string]any{})
	if info.Structured.Network == nil || info.Structured.Network.Mode != "off" {
		t.Errorf("workspace_info network: %+v", info.Structured.Network)
	}
}

// Policies that are not valid, or that the provider cannot enforce, stop
// the server at start with a message that says why.
func TestNetworkPolicyRefusedAtStart(t *testing.T) {
	n := newNewcomer(t)
	for _, c := range []struct{ flags, want string }{
		{"--network 'allow=bad_host!'", "character"},
		{"--network allow=", "empty"},
		{"--network allow=pypi.org:99999", "port"},
		{"--network allow=::1", "brackets"},
		{"--network=maybe", "want off, on or allow"},
		{"--provider docker --network allow=pypi.org", "docker provider does not support"},
		{"--provider local --isolation none --network allow=pypi.org", "needs bwrap"},
	} {
		out, errs, code := n.run("./sandbox-mcp call "+c.flags+" workspace_info", nil)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want a refusal saying %q\nstdout: %s", c.flags, code, errs, c.want, out)
		}
	}
	// --network alone, and --network on, are the old bool flag.
	for _, flags := range []string{"--network", "--network on", "--network=true"} {
		out, errs, code := n.run("./sandbox-mcp tools "+flags, nil)
		if code != 0 {
			t.Errorf("%s: exit %d\n%s\n%s", flags, code, out, errs)
		}
	}
}

// Attacks on the proxy from inside a sandbox: a CONNECT to an unlisted port
// of an allowed host, an absolute URI and a Host header that disagree, a
// name that resolves to the host's loopback, and replacing the proxy's
// socket; none reaches anything the policy does not allow.
func TestNetworkAllowAttacks(t *testing.T) {
	n := newNewcomer(t)
	index := packageIndex(t)
	other := otherLoopbackPort(t)
	_, otherPort, _ := net.SplitHostPort(other)
	// localhost is listed as a name with the other port: it resolves to
	// 127.0.0.1, which only the address itself may allow.
	flags := "--network allow=" + index + ",localhost:" + otherPort
	raw := func(request string) string {
		return `python3 - <<'EOF'
import socket
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"` + request + `")
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
print(data.decode(errors="replace"))
EOF`
	}
	for _, c := range []struct {
		name, command   string
		want, forbidden string
	}{
		{"CONNECT to an unlisted port", raw(`CONNECT ` + other + ` HTTP/1.1\r\nHost: ` + index + `\r\n\r\n`), egress.RefusalMarker + " " + other, "200 Connection established"},
		{"allowed URI, other Host", raw(`GET http://` + index + `/whoami HTTP/1.1\r\nHost: ` + other + `\r\nConnection: close\r\n\r\n`), "index saw Host " + index, "OTHER SERVICE"},
		{"other URI, allowed Host", raw(`GET http://` + other + `/ HTTP/1.1\r\nHost: ` + index + `\r\nConnection: close\r\n\r\n`), egress.RefusalMarker + " " + other, "OTHER SERVICE"},
		{"a name that resolves to loopback", "curl -sS http://localhost:" + otherPort + "/", "non-public", "OTHER SERVICE"},
		{"the proxy in origin form", raw(`GET /whoami HTTP/1.1\r\nHost: ` + index + `\r\nConnection: close\r\n\r\n`), "400 Bad Request", "index saw"},
	} {
		res := egressExec(t, n, "attack", flags, c.command)
		out := res.Structured.Stdout + res.Structured.Stderr
		if !strings.Contains(out, c.want) || strings.Contains(out, c.forbidden) {
			t.Errorf("%s: output %q; want %q and not %q", c.name, out, c.want, c.forbidden)
		}
	}

	// The sandbox cannot replace the socket the proxy listens on, nor add
	// one beside it: the directory is bound read-only. (The socket is gone
	// on the host once the call's server exited.)
	dirs, _ := filepath.Glob(filepath.Join(n.dir, "state", "sandboxes", "*", "egress"))
	if len(dirs) != 1 {
		t.Fatalf("egress directories on the host: %v", dirs)
	}
	res := egressExec(t, n, "attack", flags, `cd /.sandbox-mcp/egress
rm -f proxy.sock && echo removed
ln -sf /tmp/evil.sock proxy.sock && echo linked
mv proxy.sock x 2>/dev/null && echo moved
python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.bind("/.sandbox-mcp/egress/evil.sock"); print("bound")'
curl -sS http://`+index+`/whoami`)
	out := res.Structured.Stdout
	for _, bad := range []string{"removed", "linked", "moved", "bound"} {
		if strings.Contains(out, bad+"\n") {
			t.Errorf("the sandbox %s the proxy's socket: %s\n%s", bad, out, res.Structured.Stderr)
		}
	}
	if !strings.Contains(out, "index saw Host "+index) {
		t.Errorf("the proxy stopped working after the attempts: %s\n%s", out, res.Structured.Stderr)
	}
	if names, err := os.ReadDir(dirs[0]); err != nil || len(names) != 0 {
		t.Errorf("the egress directory after the call: %v %v; want it empty", names, err)
	}
	dir, err := os.Lstat(dirs[0])
	if err != nil || !dir.IsDir() || dir.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) || dir.Mode().Perm()&0o022 != 0 {
		t.Errorf("egress directory: %v %v; want the server's, writable by nobody else", dir, err)
	}
}
