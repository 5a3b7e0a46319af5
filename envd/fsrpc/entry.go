//go:build linux

package fsrpc

import (
	"errors"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem"
)

// MetadataPrefix is the extended-attribute namespace that holds E2B file
// metadata; EntryInfo.metadata lists the attributes under it with the prefix
// stripped.
const MetadataPrefix = "user.e2b."

// entryInfo describes path as an EntryInfo. It does not follow a final
// symlink: a link reports FILE_TYPE_SYMLINK and its target.
func entryInfo(path string) (*filesystem.EntryInfo, error) {
	info, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	return entryFromInfo(path, info), nil
}

// entryFromInfo builds an EntryInfo from info, an Lstat result for path.
func entryFromInfo(path string, info fs.FileInfo) *filesystem.EntryInfo {
	mode := info.Mode()
	e := &filesystem.EntryInfo{
		Name:         validUTF8(filepath.Base(path)),
		Type:         fileType(mode),
		Path:         validUTF8(path),
		Size:         info.Size(),
		Mode:         uint32(mode.Perm()),
		Permissions:  mode.String(),
		ModifiedTime: timestamppb.New(info.ModTime()),
		Metadata:     readMetadata(path),
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		e.Owner = validUTF8(names.user(st.Uid))
		e.Group = validUTF8(names.group(st.Gid))
	}
	if mode&fs.ModeSymlink != 0 {
		target := validUTF8(linkTarget(path))
		e.SymlinkTarget = &target
	}
	return e
}

// validUTF8 replaces invalid UTF-8 with U+FFFD. Linux names are arbitrary
// bytes but protobuf strings must be UTF-8: one odd file name would
// otherwise fail a whole ListDir at marshalling. Valid input comes back as
// it is, after one scan and without a copy.
func validUTF8(s string) string {
	return strings.ToValidUTF8(s, "\uFFFD")
}

// fileType maps a mode to E2B's FileType. Sockets, pipes and devices have no
// E2B type and report FILE_TYPE_UNSPECIFIED (their permissions string still
// says what they are).
func fileType(mode fs.FileMode) filesystem.FileType {
	switch {
	case mode.IsRegular():
		return filesystem.FileType_FILE_TYPE_FILE
	case mode.IsDir():
		return filesystem.FileType_FILE_TYPE_DIRECTORY
	case mode&fs.ModeSymlink != 0:
		return filesystem.FileType_FILE_TYPE_SYMLINK
	}
	return filesystem.FileType_FILE_TYPE_UNSPECIFIED
}

// linkTarget returns where the symlink at path points: the fully resolved
// absolute path when the chain resolves, else the link's own target made
// absolute (a dangling or looping link).
func linkTarget(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	target, err := os.Readlink(path)
	if err != nil {
		return ""
	}
	if !filepath.IsAbs(target) {
		target = filepath.Join(filepath.Dir(path), target)
	}
	return target
}

// readMetadata returns the user.e2b.* extended attributes of path (a link
// itself, not its target) with the prefix stripped. Filesystems without
// xattr support, and any other failure, give an empty map: metadata is
// advisory and never fails a Stat.
func readMetadata(path string) map[string]string {
	list, err := listXattrs(path)
	if err != nil || len(list) == 0 {
		return nil
	}
	var md map[string]string
	for _, name := range list {
		key, ok := strings.CutPrefix(name, MetadataPrefix)
		if !ok || key == "" {
			continue
		}
		val, err := getXattr(path, name)
		if err != nil {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[validUTF8(key)] = validUTF8(string(val))
	}
	return md
}

// listXattrs returns the attribute names of path, growing the buffer when the
// list changed between the size probe and the read.
func listXattrs(path string) ([]string, error) {
	for range 4 {
		size, err := unix.Llistxattr(path, nil)
		if err != nil || size == 0 {
			return nil, err
		}
		buf := make([]byte, size)
		n, err := unix.Llistxattr(path, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var out []string
		for _, name := range strings.Split(string(buf[:n]), "\x00") {
			if name != "" {
				out = append(out, name)
			}
		}
		return out, nil
	}
	return nil, unix.ERANGE
}

func getXattr(path, name string) ([]byte, error) {
	for range 4 {
		size, err := unix.Lgetxattr(path, name, nil)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size)
		n, err := unix.Lgetxattr(path, name, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
	return nil, unix.ERANGE
}

// names caches uid and gid lookups: ListDir over a large tree would otherwise
// parse /etc/passwd once per entry. Entries expire so that accounts created
// inside the sandbox show up.
var names = &nameCache{users: map[uint32]cachedName{}, groups: map[uint32]cachedName{}}

const nameTTL = 30 * time.Second

type cachedName struct {
	name    string
	expires time.Time
}

type nameCache struct {
	mu     sync.Mutex
	users  map[uint32]cachedName
	groups map[uint32]cachedName
}

// user returns the account name for uid, or the number when there is none.
func (c *nameCache) user(uid uint32) string {
	return c.get(c.users, uid, func(id string) (string, error) {
		u, err := user.LookupId(id)
		if err != nil {
			return "", err
		}
		return u.Username, nil
	})
}

// group returns the group name for gid, or the number when there is none.
func (c *nameCache) group(gid uint32) string {
	return c.get(c.groups, gid, func(id string) (string, error) {
		g, err := user.LookupGroupId(id)
		if err != nil {
			return "", err
		}
		return g.Name, nil
	})
}

func (c *nameCache) get(m map[uint32]cachedName, id uint32, lookup func(string) (string, error)) string {
	now := time.Now()
	c.mu.Lock()
	cached, ok := m[id]
	c.mu.Unlock()
	if ok && now.Before(cached.expires) {
		return cached.name
	}
	num := strconv.FormatUint(uint64(id), 10)
	name, err := lookup(num)
	if err != nil || name == "" {
		name = num
	}
	c.mu.Lock()
	m[id] = cachedName{name: name, expires: now.Add(nameTTL)}
	c.mu.Unlock()
	return name
}
