//go:build linux

package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A sandbox's disk image is a copy of a template: an empty ext4 image of
// the quota's size, made once per state directory and size with mkfs.ext4
// (StateDir/disk-templates/ext4-SIZE-vN-DIGEST.img, root's, 0600), so a
// Create copies a few MiB of metadata instead of running mkfs (about 20 ms
// for 10 GiB). The copy is a reflink where the state directory's
// filesystem can make one (btrfs, xfs), else a sparse copy of the
// template's non-zero blocks. Each copy then gets a filesystem UUID and
// directory hash seed of its own (the template is made with
// metadata_csum_seed, so changing the UUID leaves every other checksum
// valid): sandboxes share no identity (the UUID is what statfs reports as
// f_fsid), no precomputable hash collisions, and no /dev/disk/by-uuid name.
//
// Measured on ext4 with 10 GiB (2 cores, noisy): mkfs.ext4 19 ms, mount(8)
// 5 ms (3 of them its exec), truncate nil; a copy of this template 0.5-1
// ms, LOOP_CONFIGURE 0.2-3 ms (it writes the copy back), mount(2) 1 ms.
//
// DIGEST, in the name, is a CRC-32C of the template's non-zero 4 KiB blocks
// and their numbers; every copy checks it, so a template damaged or
// deleted since it was made is found, removed and made again.
const (
	templatesDir = "disk-templates"
	// templateVersion names the mkfs options below; a change makes new
	// templates rather than reusing old ones.
	templateVersion = "v2"
	blockSize       = 4096
)

// mkfsOptions are the mkfs.ext4 options of a template: no reserved blocks
// (the sandbox gets the whole size); inode tables and journal initialised
// lazily, so mkfs writes a few MiB, not hundreds; no discard pass over a
// sparse file; metadata_csum_seed so a copy's UUID can change alone; no
// resize_inode, whose blocks reserved for growing the filesystem online
// (which a sandbox image never does) are 4 MiB of the 4.2 MiB a 10 GiB
// image would otherwise hold (160 KiB without them), all of it copied and
// written back by LOOP_CONFIGURE on every Create.
var mkfsOptions = []string{"-q", "-F", "-b", strconv.Itoa(blockSize), "-m", "0", "-O", "metadata_csum_seed,^resize_inode",
	"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard"}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// diskTemplate is a template image this quota copies.
type diskTemplate struct {
	path   string
	digest uint32
}

// templatePrefix is the name prefix of this quota's templates.
func (q *diskQuota) templatePrefix() string {
	return fmt.Sprintf("ext4-%d-%s-", q.size, templateVersion)
}

// template returns a template to copy: the one last used, else one found
// in the templates directory, else a new one.
func (q *diskQuota) template(ctx context.Context) (diskTemplate, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.tmpl.path != "" {
		return q.tmpl, nil
	}
	entries, _ := os.ReadDir(q.templates)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), q.templatePrefix())
		if !ok || !strings.HasSuffix(rest, ".img") {
			continue
		}
		digest, err := strconv.ParseUint(strings.TrimSuffix(rest, ".img"), 16, 32)
		if err != nil {
			continue
		}
		q.tmpl = diskTemplate{path: filepath.Join(q.templates, e.Name()), digest: uint32(digest)}
		return q.tmpl, nil
	}
	t, err := q.makeTemplate(ctx)
	if err != nil {
		return diskTemplate{}, err
	}
	q.tmpl = t
	return t, nil
}

// dropTemplate removes template t, found damaged or missing, so the next
// copy makes a new one.
func (q *diskQuota) dropTemplate(t diskTemplate) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.tmpl == t {
		q.tmpl = diskTemplate{}
	}
	_ = os.Remove(t.path)
}

// makeTemplate runs mkfs.ext4 on a new sparse file and renames it into
// place under its digest. Unfinished templates older than a minute (of a
// server that died making one) are removed.
func (q *diskQuota) makeTemplate(ctx context.Context) (diskTemplate, error) {
	if err := os.MkdirAll(q.templates, 0o700); err != nil {
		return diskTemplate{}, fmt.Errorf("disk template: %w", err)
	}
	removeStaleTemplates(q.templates)
	f, err := os.CreateTemp(q.templates, ".new-*.img")
	if err != nil {
		return diskTemplate{}, fmt.Errorf("disk template: %w", err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		_ = f.Close()
		if !ok {
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Truncate(q.size); err != nil {
		return diskTemplate{}, fmt.Errorf("disk template: %w", err)
	}
	// The sandbox's directories, made by mkfs rather than on each mount:
	// there their first mkdir costs 2 ms of reads and allocations.
	root, err := os.MkdirTemp(q.templates, ".root-")
	if err != nil {
		return diskTemplate{}, fmt.Errorf("disk template: %w", err)
	}
	defer func() { _ = os.RemoveAll(root) }()
	for _, sub := range sandboxSubdirs {
		if err := os.Mkdir(filepath.Join(root, sub), 0o700); err != nil {
			return diskTemplate{}, fmt.Errorf("disk template: %w", err)
		}
	}
	if err := run(ctx, q.mkfs, append(mkfsOptions, "-d", root, tmp)...); err != nil {
		return diskTemplate{}, fmt.Errorf("disk template: %w", err)
	}
	if _, err := readSuperblock(f); err != nil {
		return diskTemplate{}, fmt.Errorf("disk template: %w", err)
	}
	digest, err := copyImage(f, nil, q.size)
	if err != nil {
		return diskTemplate{}, fmt.Errorf("disk template: %w", err)
	}
	t := diskTemplate{path: filepath.Join(q.templates, fmt.Sprintf("%s%08x.img", q.templatePrefix(), digest)), digest: digest}
	if err := os.Rename(tmp, t.path); err != nil {
		return diskTemplate{}, fmt.Errorf("disk template: %w", err)
	}
	ok = true
	return t, nil
}

// removeStaleTemplates removes unfinished templates in dir older than a
// minute, and the directories their mkfs was filled from.
func removeStaleTemplates(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".new-") && !strings.HasPrefix(e.Name(), ".root-") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Minute {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// errTemplateDamaged means a template's content does not match its digest.
var errTemplateDamaged = errors.New("the disk template is damaged")

// copyTemplate writes image img, a new file, as a copy of template t with
// a fresh UUID and hash seed. errTemplateDamaged (a missing template
// file too) means t cannot be used; img is then removed.
func (q *diskQuota) copyTemplate(t diskTemplate, img string) (err error) {
	src, err := os.Open(t.path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %v", errTemplateDamaged, err)
	}
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != q.size {
		return fmt.Errorf("%w: size %d, want %d", errTemplateDamaged, fi.Size(), q.size)
	}
	dst, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(img)
		}
	}()
	var digest uint32
	if unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())) == nil {
		// Shared extents: check the digest on the copy.
		digest, err = copyImage(dst, nil, q.size)
	} else {
		if err = dst.Truncate(q.size); err != nil {
			return err
		}
		digest, err = copyImage(src, dst, q.size)
	}
	if err != nil {
		return err
	}
	if digest != t.digest {
		return fmt.Errorf("%w: digest %08x, want %08x", errTemplateDamaged, digest, t.digest)
	}
	return newFilesystemIdentity(dst)
}

// copyImage reads src's non-zero blocks (past its holes) and returns their
// digest; when dst is not nil it writes them to dst at the same offsets.
func copyImage(src, dst *os.File, size int64) (uint32, error) {
	fd := int(src.Fd())
	buf := make([]byte, 1<<20)
	zero := make([]byte, blockSize)
	var num [8]byte
	crc := uint32(0)
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return 0, err
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return 0, err
		}
		data -= data % blockSize
		for pos := data; pos < hole; {
			n, err := src.ReadAt(buf[:min(int64(len(buf)), hole-pos)], pos)
			if n == 0 && err != nil {
				if err == io.EOF {
					return 0, fmt.Errorf("%w: shorter than its size", errTemplateDamaged)
				}
				return 0, err
			}
			chunk := buf[:n]
			// Runs of non-zero blocks: digested and written together.
			for i := 0; i < len(chunk); {
				if bytes.Equal(chunk[i:min(i+blockSize, len(chunk))], zero[:min(blockSize, len(chunk)-i)]) {
					i += blockSize
					continue
				}
				j := i
				for j < len(chunk) && !bytes.Equal(chunk[j:min(j+blockSize, len(chunk))], zero[:min(blockSize, len(chunk)-j)]) {
					binary.BigEndian.PutUint64(num[:], uint64(pos+int64(j))/blockSize)
					crc = crc32.Update(crc, castagnoli, num[:])
					crc = crc32.Update(crc, castagnoli, chunk[j:min(j+blockSize, len(chunk))])
					j += blockSize
				}
				if dst != nil {
					if _, err := dst.WriteAt(chunk[i:min(j, len(chunk))], pos+int64(i)); err != nil {
						return 0, err
					}
				}
				i = j
			}
			pos += int64(n)
		}
		off = hole
	}
	return crc, nil
}

// The ext4 superblock fields this file reads or writes (offsets into the
// 1024-byte superblock; see the kernel's struct ext4_super_block).
const (
	superblockOffset   = 1024
	superblockSize     = 1024
	sbFirstDataBlock   = 0x14
	sbLogBlockSize     = 0x18
	sbBlocksPerGroup   = 0x20
	sbMagic            = 0x38
	sbFeatureIncompat  = 0x60
	sbFeatureROCompat  = 0x64
	sbUUID             = 0x68
	sbHashSeed         = 0xEC
	sbBlocksCountLo    = 0x04
	sbBlocksCountHi    = 0x150
	sbBlockGroupNr     = 0x5A
	sbChecksumType     = 0x175
	sbChecksum         = 0x3FC
	ext4Magic          = 0xEF53
	incompat64Bit      = 0x80
	incompatCsumSeed   = 0x2000
	roCompatSparseSupr = 0x1
	roCompatMetaCsum   = 0x400
)

// superblockInfo is what newFilesystemIdentity needs of a filesystem's
// primary superblock.
type superblockInfo struct {
	blockSize      int64
	firstDataBlock int64
	blocksPerGroup int64
	groups         int64
	sparseSuper    bool
}

// readSuperblock reads f's primary superblock and checks it is one a copy
// can be given a new identity in: ext4, a valid checksum, metadata_csum
// with metadata_csum_seed.
func readSuperblock(f *os.File) (superblockInfo, error) {
	sb := make([]byte, superblockSize)
	if _, err := f.ReadAt(sb, superblockOffset); err != nil {
		return superblockInfo{}, fmt.Errorf("%w: superblock: %v", errTemplateDamaged, err)
	}
	le := binary.LittleEndian
	if le.Uint16(sb[sbMagic:]) != ext4Magic {
		return superblockInfo{}, fmt.Errorf("%w: no ext4 superblock", errTemplateDamaged)
	}
	if le.Uint32(sb[sbFeatureROCompat:])&roCompatMetaCsum == 0 || le.Uint32(sb[sbFeatureIncompat:])&incompatCsumSeed == 0 || sb[sbChecksumType] != 1 {
		return superblockInfo{}, fmt.Errorf("%w: made without metadata_csum and metadata_csum_seed", errTemplateDamaged)
	}
	if le.Uint32(sb[sbChecksum:]) != superblockChecksum(sb) {
		return superblockInfo{}, fmt.Errorf("%w: superblock checksum", errTemplateDamaged)
	}
	info := superblockInfo{
		blockSize:      1024 << le.Uint32(sb[sbLogBlockSize:]),
		firstDataBlock: int64(le.Uint32(sb[sbFirstDataBlock:])),
		blocksPerGroup: int64(le.Uint32(sb[sbBlocksPerGroup:])),
		sparseSuper:    le.Uint32(sb[sbFeatureROCompat:])&roCompatSparseSupr != 0,
	}
	blocks := int64(le.Uint32(sb[sbBlocksCountLo:]))
	if le.Uint32(sb[sbFeatureIncompat:])&incompat64Bit != 0 {
		blocks |= int64(le.Uint32(sb[sbBlocksCountHi:])) << 32
	}
	if info.blocksPerGroup == 0 {
		return superblockInfo{}, fmt.Errorf("%w: no blocks per group", errTemplateDamaged)
	}
	info.groups = (blocks - info.firstDataBlock + info.blocksPerGroup - 1) / info.blocksPerGroup
	return info, nil
}

// superblockChecksum is the CRC-32C ext4 keeps in a superblock: of the
// bytes before the checksum, seeded with ~0 and not inverted.
func superblockChecksum(sb []byte) uint32 {
	return ^crc32.Checksum(sb[:sbChecksum], castagnoli)
}

// superblockGroups returns the block groups that hold a superblock: all of
// them, or with sparse_super 0, 1 and the powers of 3, 5 and 7.
func superblockGroups(info superblockInfo) []int64 {
	if !info.sparseSuper {
		groups := make([]int64, info.groups)
		for g := range groups {
			groups[g] = int64(g)
		}
		return groups
	}
	groups := []int64{0}
	if info.groups > 1 {
		groups = append(groups, 1)
	}
	for _, base := range []int64{3, 5, 7} {
		for g := base; g < info.groups; g *= base {
			groups = append(groups, g)
		}
	}
	return groups
}

// newFilesystemIdentity gives the filesystem in f a random UUID and
// directory hash seed, in its primary superblock and every backup.
func newFilesystemIdentity(f *os.File) error {
	info, err := readSuperblock(f)
	if err != nil {
		return err
	}
	var ids [32]byte
	if _, err := rand.Read(ids[:]); err != nil {
		return err
	}
	for _, id := range [][]byte{ids[:16], ids[16:]} {
		id[6] = id[6]&0x0f | 0x40 // version 4
		id[8] = id[8]&0x3f | 0x80 // RFC 4122 variant
	}
	sb := make([]byte, superblockSize)
	le := binary.LittleEndian
	for _, g := range superblockGroups(info) {
		off := int64(superblockOffset)
		if g > 0 {
			off = (g*info.blocksPerGroup + info.firstDataBlock) * info.blockSize
		}
		if _, err := f.ReadAt(sb, off); err != nil {
			return fmt.Errorf("superblock of group %d: %w", g, err)
		}
		if le.Uint16(sb[sbMagic:]) != ext4Magic || int64(le.Uint16(sb[sbBlockGroupNr:])) != g {
			return fmt.Errorf("%w: no superblock in group %d", errTemplateDamaged, g)
		}
		copy(sb[sbUUID:sbUUID+16], ids[:16])
		copy(sb[sbHashSeed:sbHashSeed+16], ids[16:])
		le.PutUint32(sb[sbChecksum:], superblockChecksum(sb))
		if _, err := f.WriteAt(sb, off); err != nil {
			return err
		}
	}
	return nil
}

// loopMount attaches image img to a free loop device with one
// LOOP_CONFIGURE (autoclear: the device goes with its last mount) and
// mounts it at vol. errNoLoopConfigure means the kernel lacks the ioctl
// (before Linux 5.8).
func loopMount(img, vol string, flags uintptr, data string) error {
	backing, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer func() { _ = backing.Close() }()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer func() { _ = ctl.Close() }()
	cfg := unix.LoopConfig{Fd: uint32(backing.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], img)
	// Another process may take the free device first: then ask again.
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		loop, err := os.OpenFile(dev, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if errors.Is(err, unix.EBUSY) {
			_ = loop.Close()
			continue
		}
		if err != nil {
			_ = loop.Close()
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) {
				return errNoLoopConfigure
			}
			return fmt.Errorf("LOOP_CONFIGURE %s: %w", dev, err)
		}
		err = unix.Mount(dev, vol, "ext4", flags, data)
		// With the mount holding it (or, when it failed, with nothing),
		// closing the device leaves autoclear to detach it.
		_ = loop.Close()
		if err != nil {
			return fmt.Errorf("mount %s: %w", dev, err)
		}
		return nil
	}
	return errors.New("no free loop device (taken by others as fast as they were found)")
}

// errNoLoopConfigure means the kernel has no LOOP_CONFIGURE.
var errNoLoopConfigure = errors.New("no LOOP_CONFIGURE")
