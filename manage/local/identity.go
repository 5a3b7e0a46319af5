//go:build linux

package local

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The sandbox user's name, as /etc/passwd and /etc/group inside a bwrap
// sandbox give it for insideUID and insideGID. The host's own entry for uid
// 1000 (a login user, often) would otherwise name the sandbox's processes
// after a person or a service they have nothing to do with.
const sandboxUserName = "sandbox"

// Files in a sandbox's directory that are bound read-only over /etc/passwd
// and /etc/group (the rest of /etc is the host's).
const (
	passwdFile = "passwd"
	groupFile  = "group"
)

// writeIdentityFiles writes dir's passwd and group files: the host's
// entries, without any that takes the sandbox user's id or name, plus the
// sandbox user (home the workspace, shell bash or sh). They are rewritten at
// each start, so the host's later changes come in.
func writeIdentityFiles(dir string) error {
	shell := "/bin/sh"
	if _, err := os.Stat("/bin/bash"); err == nil {
		shell = "/bin/bash"
	}
	user := fmt.Sprintf("%s:x:%d:%d:sandbox user:%s:%s", sandboxUserName, insideUID, insideGID, insideWorkspace, shell)
	group := fmt.Sprintf("%s:x:%d:", sandboxUserName, insideGID)
	for _, f := range []struct{ host, name, entry string }{
		{"/etc/passwd", passwdFile, user},
		{"/etc/group", groupFile, group},
	} {
		host, err := os.ReadFile(f.host)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		data := identityEntries(host, insideUID, f.entry)
		if err := writeFileAtomic(filepath.Join(dir, f.name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// identityEntries returns the lines of a passwd or group file (name:x:id:…)
// without those whose id is id or whose name is the sandbox user's, then
// entry.
func identityEntries(host []byte, id int, entry string) []byte {
	var b bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(host))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.SplitN(line, ":", 4)
		if len(fields) >= 3 && (fields[0] == sandboxUserName || fields[2] == strconv.Itoa(id)) {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	b.WriteString(entry)
	b.WriteByte('\n')
	return b.Bytes()
}
