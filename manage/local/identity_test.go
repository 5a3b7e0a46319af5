//go:build linux

package local

import (
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// Inside a bwrap sandbox uid 1000 is the sandbox user, whatever the host
// calls its uid 1000; the host's other entries stay.
func TestSandboxUserIsNamedSandbox(t *testing.T) {
	p := needBwrap(t, Config{})
	sb := create(t, p, manage.SandboxConfig{})
	c := connectTo(t, p, sb.ID)
	if got := strings.TrimSpace(shOK(t, c, "id")); !strings.HasPrefix(got, "uid=1000(sandbox) gid=1000(sandbox)") {
		t.Errorf("id: %q", got)
	}
	if got := strings.TrimSpace(shOK(t, c, `echo "$USER $LOGNAME $HOME"; grep -c '^sandbox:' /etc/passwd; grep -c ':1000:' /etc/passwd; grep -c '^root:x:0:' /etc/passwd; grep -c '^sandbox:x:1000:' /etc/group`)); got != "sandbox sandbox /workspace\n1\n1\n1\n1" {
		t.Errorf("identity: %q", got)
	}
	// The files cannot be changed from inside.
	shFails(t, c, "echo x >> /etc/passwd")
}

func TestIdentityEntries(t *testing.T) {
	host := "root:x:0:0:root:/root:/bin/bash\ncloudsdk:x:1000:1000::/home/cloudsdk:/bin/bash\nsandbox:x:1234:1234::/:/bin/sh\nredis:x:102:105::/var/lib/redis:/usr/sbin/nologin\n"
	got := string(identityEntries([]byte(host), 1000, "sandbox:x:1000:1000:sandbox user:/workspace:/bin/bash"))
	want := "root:x:0:0:root:/root:/bin/bash\nredis:x:102:105::/var/lib/redis:/usr/sbin/nologin\nsandbox:x:1000:1000:sandbox user:/workspace:/bin/bash\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
