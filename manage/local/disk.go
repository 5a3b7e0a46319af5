//go:build linux

package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// DefaultDisk is the disk quota of a sandbox (Config.Disk): 10 GiB. Enough
// for a typical project with its dependencies (a node_modules tree, a
// Python environment with a large wheel or two, build output); small enough
// that a few dozen runaway sandboxes cannot fill a server's disk. The image
// is sparse, so a sandbox costs the host only what it wrote.
const DefaultDisk = 10 << 30

// A bwrap sandbox of a root server keeps its workspace, /tmp and run
// directory (and with them its run logs) on a filesystem of its own: an ext4
// image, disk.img in its directory, sized Config.Disk, copied from a
// template (disktemplate.go) and loop-mounted at volume/. The kernel enforces the quota: a write past it fails with ENOSPC
// inside the sandbox, and the host's filesystem holds only what the image
// holds. workspace, tmp and run in the sandbox directory are then symlinks
// the server made into volume/ (the directory is the server's, so the
// sandbox cannot change them). A loop mount needs root; without it (an
// unprivileged server), or where mkfs.ext4, mount or loop devices are
// missing, sandboxes have no quota and every Sandbox says so.
//
// ext4 on a loop device was chosen over project quotas (XFS, or ext4 with
// the prjquota feature) because those need the state directory's
// filesystem made and mounted for them, which almost no host is; and over a
// tmpfs with size=, which would hold the workspace in memory.
const (
	diskImageFile = "disk.img"
	volumeDir     = "volume"
)

// sandboxSubdirs are the directories a sandbox writes.
var sandboxSubdirs = []string{"workspace", "tmp", "run"}

// diskQuota makes and mounts sandbox disk images.
type diskQuota struct {
	size      int64
	mkfs      string // mkfs.ext4, for templates (disktemplate.go)
	mount     string // mount(8), where the kernel has no LOOP_CONFIGURE
	templates string // StateDir/disk-templates

	mu   sync.Mutex
	tmpl diskTemplate // the template last used; zero: none yet
}

// newDiskQuota finds the tools a quota needs; nil with the reason when it
// cannot be had here. Its templates live in stateDir.
func newDiskQuota(size int64, stateDir string) (*diskQuota, string) {
	if os.Geteuid() != 0 {
		return nil, "a loop-mounted image needs a root server"
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return nil, "no loop devices (/dev/loop-control)"
	}
	q := &diskQuota{size: size, templates: filepath.Join(stateDir, templatesDir)}
	var err error
	if q.mkfs, err = lookSbin("mkfs.ext4"); err != nil {
		return nil, "mkfs.ext4 not found (install e2fsprogs)"
	}
	if q.mount, err = lookSbin("mount"); err != nil {
		return nil, "mount not found"
	}
	return q, ""
}

// lookSbin finds a system tool in PATH or the sbin directories.
func lookSbin(name string) (string, error) {
	if path, err := exec.LookPath(name); err == nil {
		return path, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		path := filepath.Join(dir, name)
		if fi, err := os.Stat(path); err == nil && fi.Mode()&0o111 != 0 {
			return path, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// create makes sandbox directory dir's image and mounts it.
func (q *diskQuota) create(ctx context.Context, dir string) error {
	if err := q.makeImage(ctx, filepath.Join(dir, diskImageFile)); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	if err := os.Mkdir(filepath.Join(dir, volumeDir), 0o711); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	return q.mountVolume(ctx, dir)
}

// makeImage makes image img, a copy of the template. A template found
// damaged or missing is made again, once.
func (q *diskQuota) makeImage(ctx context.Context, img string) error {
	for attempt := 0; ; attempt++ {
		t, err := q.template(ctx)
		if err != nil {
			return err
		}
		err = q.copyTemplate(t, img)
		if err == nil {
			return nil
		}
		if attempt > 0 || !errors.Is(err, errTemplateDamaged) {
			return err
		}
		q.dropTemplate(t)
	}
}

// mountVolume mounts dir's image at volume/ unless it is mounted already
// (its daemon's end unmounts it, but a server that died without cleaning
// up leaves it mounted).
func (q *diskQuota) mountVolume(ctx context.Context, dir string) error {
	vol := filepath.Join(dir, volumeDir)
	if mounted(dir, vol) {
		return nil
	}
	// discard: space freed inside goes back to the host.
	img := filepath.Join(dir, diskImageFile)
	err := loopMount(img, vol, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "discard")
	if errors.Is(err, errNoLoopConfigure) {
		err = run(ctx, q.mount, "-t", "ext4", "-o", "loop,nosuid,nodev,noatime,discard", img, vol)
	}
	if err != nil {
		return fmt.Errorf("mount the disk image: %w", err)
	}
	// The filesystem's root: the server's, searchable only.
	return os.Chmod(vol, 0o711)
}

// mounted reports whether vol, a directory in dir, is a mount point.
func mounted(dir, vol string) bool {
	var a, b unix.Stat_t
	if unix.Lstat(dir, &a) != nil || unix.Lstat(vol, &b) != nil {
		return false
	}
	return a.Dev != b.Dev
}

// mountVolume mounts sandbox directory dir's volume for a restart.
func (p *Provider) mountVolume(ctx context.Context, dir string) error {
	if mounted(dir, filepath.Join(dir, volumeDir)) {
		return nil
	}
	if p.disk == nil {
		return fmt.Errorf("the sandbox keeps its files on a disk image this server cannot mount (%s)", p.diskWhy)
	}
	return p.disk.mountVolume(ctx, dir)
}

// hasDisk reports whether sandbox directory dir has a disk image.
func hasDisk(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, diskImageFile))
	return err == nil
}

// unmountVolume detaches sandbox directory dir's volume, if mounted, so the
// directory can be deleted; the loop device goes once nothing uses it.
func unmountVolume(dir string) {
	vol := filepath.Join(dir, volumeDir)
	if mounted(dir, vol) {
		_ = unix.Unmount(vol, unix.MNT_DETACH)
	}
}

// removeSandboxDir deletes a sandbox directory, unmounting its volume first.
func removeSandboxDir(dir string) error {
	unmountVolume(dir)
	return os.RemoveAll(dir)
}

// subdirPath is where sandbox directory dir's subdirectory sub really is:
// in its volume when it has a disk image.
func subdirPath(dir, sub string) string {
	if hasDisk(dir) {
		return filepath.Join(dir, volumeDir, sub)
	}
	return filepath.Join(dir, sub)
}

// linkSubdirs makes workspace, tmp and run in dir symlinks into its volume.
func linkSubdirs(dir string) error {
	for _, sub := range sandboxSubdirs {
		link := filepath.Join(dir, sub)
		target := filepath.Join(volumeDir, sub)
		if got, err := os.Readlink(link); err == nil && got == target {
			continue
		}
		if err := os.Symlink(target, link); err != nil {
			return err
		}
	}
	return nil
}

// run runs a tool and returns its output as the error when it fails.
func run(ctx context.Context, path string, args ...string) error {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if msg == "" {
			return fmt.Errorf("%s: %w", filepath.Base(path), err)
		}
		return fmt.Errorf("%s: %w: %s", filepath.Base(path), err, msg)
	}
	return nil
}

// noDiskQuotaWarning says that a sandbox's disk use is not bounded.
func noDiskQuotaWarning(why string) string {
	return "Disk use is NOT bounded for this sandbox (" + why + "): its workspace, /tmp and run logs can grow until the host's filesystem is full."
}
