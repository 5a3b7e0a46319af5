//go:build linux

package local

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// A root server's bwrap sandbox keeps its files on its own image: mounted
// while it runs, unmounted when it stops, mounted again (files kept) when
// it resumes, deleted with it.
func TestDiskImageLifecycle(t *testing.T) {
	testenv.RequireRoot(t)
	state := newStateDir(t)
	p := needBwrap(t, Config{StateDir: state, Disk: 32 << 20})
	if p.disk == nil {
		testenv.Missing(t, "a disk quota here (%s): loop devices, mkfs.ext4, mount", p.diskWhy)
	}
	sb := create(t, p, manage.SandboxConfig{})
	dir := p.dir(sb.ID)
	vol := filepath.Join(dir, volumeDir)
	if !hasDisk(dir) || !mounted(dir, vol) {
		t.Fatalf("sandbox %s: disk image %v, mounted %v", sb.ID, hasDisk(dir), mounted(dir, vol))
	}
	c := connectTo(t, p, sb.ID)
	shOK(t, c, "echo kept > f")
	allocated := func() int64 {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, diskImageFile), &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks * 512
	}
	// Sparse: the host holds only what the sandbox wrote.
	before := allocated()
	if before > 8<<20 {
		t.Errorf("a fresh image takes %d bytes on the host; want it sparse", before)
	}
	if out := shFails(t, c, "head -c 40000000 /dev/zero > big"); !strings.Contains(out, "No space left") {
		t.Errorf("writing past the quota: %q; want ENOSPC", out)
	}
	// The write filled the image (not the host's disk), and the host holds
	// no more than the image's size. sync: through the loop device into
	// the image file.
	shOK(t, c, "sync")
	if after := allocated(); after < before+16<<20 || after > 33<<20 {
		t.Errorf("the image takes %d bytes on the host after the write (%d before); want it filled, at most the 32 MiB quota", after, before)
	}
	for _, w := range sb.Warnings {
		if strings.Contains(w, "Disk use is NOT bounded") {
			t.Errorf("warning on a sandbox with a quota: %q", w)
		}
	}
	if err := p.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if mounted(dir, vol) {
		t.Error("a stopped sandbox's image is still mounted")
	}
	p2 := needBwrap(t, Config{StateDir: state, Disk: 32 << 20})
	if err := p2.Resume(testCtx(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := shOK(t, connectTo(t, p2, sb.ID), "cat f"); got != "kept" {
		t.Errorf("after resume: %q; want the file kept", got)
	}
	if err := p2.Kill(testCtx(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("killed sandbox's directory: %v", err)
	}
	data, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(data), sb.ID) {
		t.Errorf("a mount of the killed sandbox is left:\n%s", data)
	}
}

// Without a quota (an unprivileged server, or turned off) every bwrap
// Sandbox says its disk use is not bounded.
func TestNoDiskQuotaIsSaid(t *testing.T) {
	p := needBwrap(t, Config{Disk: -1})
	sb := create(t, p, manage.SandboxConfig{})
	found := false
	for _, w := range sb.Warnings {
		found = found || strings.Contains(w, "Disk use is NOT bounded")
	}
	if !found {
		t.Errorf("warnings %q; want one saying disk use is not bounded", sb.Warnings)
	}
}

// newTestQuota is a quota of size bytes with its templates in a temporary
// directory; it needs mkfs.ext4, not root (it mounts nothing).
func newTestQuota(t *testing.T, size int64) *diskQuota {
	t.Helper()
	mkfs, err := lookSbin("mkfs.ext4")
	if err != nil {
		testenv.Missing(t, "mkfs.ext4 (e2fsprogs)")
	}
	return &diskQuota{size: size, mkfs: mkfs, templates: filepath.Join(t.TempDir(), templatesDir)}
}

// copyImageFor copies q's template to a new image in a temporary directory.
func copyImageFor(t *testing.T, q *diskQuota) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), diskImageFile)
	if err := q.makeImage(testCtx(t), img); err != nil {
		t.Fatal(err)
	}
	return img
}

// fsck checks the filesystem in img without changing it.
func fsck(t *testing.T, img string) {
	t.Helper()
	e2fsck, err := lookSbin("e2fsck")
	if err != nil {
		testenv.Missing(t, "e2fsck (e2fsprogs)")
	}
	if out, err := exec.Command(e2fsck, "-f", "-n", img).CombinedOutput(); err != nil {
		t.Errorf("e2fsck %s: %v\n%s", img, err, out)
	}
}

// superblockField reads n bytes at off in img's primary superblock.
func superblockField(t *testing.T, img string, off, n int) []byte {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, int64(superblockOffset+off)); err != nil {
		t.Fatal(err)
	}
	return b
}

// Copies of the template are whole, clean filesystems of the quota's size,
// sparse on the host, each with a UUID and hash seed of its own (in every
// superblock: 1 GiB has eight block groups, with backups in 1, 3, 5 and 7).
func TestDiskImageCopies(t *testing.T) {
	q := newTestQuota(t, 1<<30)
	a, b := copyImageFor(t, q), copyImageFor(t, q)
	fsck(t, a)
	fsck(t, b)
	for _, field := range []struct {
		name string
		off  int
	}{{"UUID", sbUUID}, {"hash seed", sbHashSeed}} {
		fa, fb := superblockField(t, a, field.off, 16), superblockField(t, b, field.off, 16)
		ft := superblockField(t, q.tmpl.path, field.off, 16)
		if bytes.Equal(fa, fb) || bytes.Equal(fa, ft) || bytes.Equal(fb, ft) {
			t.Errorf("%s: copies %x and %x, template %x; want all different", field.name, fa, fb, ft)
		}
	}
	if out, err := exec.Command("dumpe2fs", "-h", "-o", "superblock=98304", "-o", "blocksize=4096", a).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), uuidString(superblockField(t, a, sbUUID, 16))) {
		t.Errorf("backup superblock in group 3 (err %v) lacks the copy's UUID:\n%s", err, out)
	}
	var st unix.Stat_t
	if err := unix.Stat(a, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != q.size || st.Blocks*512 >= q.size/4 {
		t.Errorf("copy: size %d, %d bytes allocated; want %d, sparse", st.Size, st.Blocks*512, q.size)
	}
}

// A template damaged or deleted after it was made is found when it is
// copied, and made again.
func TestDiskTemplateRemade(t *testing.T) {
	q := newTestQuota(t, 64<<20)
	copyImageFor(t, q)
	first := q.tmpl
	// Damage a block of metadata past the superblock.
	f, err := os.OpenFile(first.path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("damage"), 2*blockSize+100); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	img := copyImageFor(t, q)
	fsck(t, img)
	second := q.tmpl
	if second == first {
		t.Fatalf("template %s kept after it was damaged", first.path)
	}
	if _, err := os.Stat(first.path); !os.IsNotExist(err) {
		t.Errorf("damaged template: %v; want it removed", err)
	}
	if err := os.Remove(second.path); err != nil {
		t.Fatal(err)
	}
	fsck(t, copyImageFor(t, q))
	if _, err := os.Stat(q.tmpl.path); err != nil {
		t.Errorf("template after the last was deleted: %v", err)
	}
	// A new quota (another server) uses the template in the directory.
	q2 := &diskQuota{size: q.size, mkfs: q.mkfs, templates: q.templates}
	copyImageFor(t, q2)
	if q2.tmpl != q.tmpl {
		t.Errorf("second quota's template %+v; want %+v", q2.tmpl, q.tmpl)
	}
}

// Two sandboxes' volumes are separate filesystems: a file written in one is
// not in the other, and their filesystem ids differ.
func TestDiskImagesIndependent(t *testing.T) {
	testenv.RequireRoot(t)
	p := needBwrap(t, Config{Disk: 32 << 20})
	if p.disk == nil {
		testenv.Missing(t, "a disk quota here (%s): loop devices, mkfs.ext4, mount", p.diskWhy)
	}
	a, b := create(t, p, manage.SandboxConfig{}), create(t, p, manage.SandboxConfig{})
	ca, cb := connectTo(t, p, a.ID), connectTo(t, p, b.ID)
	shOK(t, ca, "echo mine > only-in-a && head -c 1000000 /dev/zero > /tmp/big")
	if out := shOK(t, cb, "ls -A; ls -A /tmp; df -k . | tail -1"); strings.Contains(out, "only-in-a") || strings.Contains(out, "big") {
		t.Errorf("b sees a's files:\n%s", out)
	}
	var sa, sb unix.Statfs_t
	if err := unix.Statfs(filepath.Join(p.dir(a.ID), volumeDir), &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Statfs(filepath.Join(p.dir(b.ID), volumeDir), &sb); err != nil {
		t.Fatal(err)
	}
	if sa.Fsid == sb.Fsid {
		t.Errorf("both volumes have fsid %v", sa.Fsid)
	}
}

// uuidString formats a UUID as dumpe2fs prints it.
func uuidString(b []byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// What a server killed while making a template leaves (its unfinished
// image and the directory mkfs was filling it from) is removed once it is
// older than a minute; a fresh one, maybe another server's work in
// progress, is kept.
func TestStaleTemplatePiecesRemoved(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-2 * time.Minute)
	for _, name := range []string{".new-1.img", ".root-1", ".new-2.img", ".root-2", "ext4-keep.img"} {
		path := filepath.Join(dir, name)
		var err error
		if strings.HasPrefix(name, ".root-") {
			err = os.MkdirAll(filepath.Join(path, "workspace"), 0o700)
		} else {
			err = os.WriteFile(path, []byte("x"), 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, "1.img") || strings.HasSuffix(name, "-1") || name == "ext4-keep.img" {
			if err := os.Chtimes(path, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	removeStaleTemplates(dir)
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{".new-2.img", ".root-2", "ext4-keep.img"}; !slices.Equal(left, want) {
		t.Fatalf("left %v; want %v", left, want)
	}
}
