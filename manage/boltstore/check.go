package boltstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"

	"github.com/sandbox-mcp/sandbox-mcp/manage/filelock"
)

// bbolt maps the whole file and reads pages straight from the mapping: a
// page beyond the end of a truncated file is not an error but a SIGBUS,
// which kills the process (recover cannot catch it). checkFile reads what
// bbolt would trust before it maps anything, and calls a file that would
// make it read past its end corrupt.
//
// The layout (bbolt v1.4, file format version 2, in the host's byte order):
// pages 0 and 1 are meta pages; a page starts with a 16-byte header (id
// u64, flags u16, count u16, overflow u32), and a meta page's body is
//
//	magic u32, version u32, pageSize u32, flags u32,
//	root bucket {root pgid u64, sequence u64}, freelist pgid u64,
//	pgid u64 (the high-water mark: pages in use are below it), txid u64,
//	checksum u64 (FNV-1a 64 of the 56 bytes before it)
//
// bbolt uses the valid meta page with the higher txid.
const (
	boltMagic          = 0xED0CDAED
	boltVersion        = 2
	boltPageHeaderSize = 16
	boltMetaSize       = 64
	boltNoFreelist     = ^uint64(0)
)

// boltMeta is the part of a meta page the check needs.
type boltMeta struct {
	pageSize       uint64
	root, freelist uint64
	pgid, txid     uint64
}

// parseBoltMeta decodes the meta page at the start of page; ok is false when
// it is not a valid meta page (magic, version or checksum wrong).
func parseBoltMeta(page []byte) (boltMeta, bool) {
	if len(page) < boltPageHeaderSize+boltMetaSize {
		return boltMeta{}, false
	}
	body := page[boltPageHeaderSize : boltPageHeaderSize+boltMetaSize]
	ne := binary.NativeEndian
	h := fnv.New64a()
	_, _ = h.Write(body[:56])
	if ne.Uint32(body[0:]) != boltMagic || ne.Uint32(body[4:]) != boltVersion || ne.Uint64(body[56:]) != h.Sum64() {
		return boltMeta{}, false
	}
	return boltMeta{
		pageSize: uint64(ne.Uint32(body[8:])),
		root:     ne.Uint64(body[16:]),
		freelist: ne.Uint64(body[32:]),
		pgid:     ne.Uint64(body[40:]),
		txid:     ne.Uint64(body[48:]),
	}, true
}

// checkFile reports (as errCorrupt) a store file bbolt must not map: an
// empty one (a file this store made is never empty, see create), one with
// no valid meta page, or whose meta page names pages beyond the end of the
// file (a truncated file). A missing file is fine (create makes it), and so
// is a file it cannot open: bbolt reports that itself.
// It holds a shared lock on the file while it reads, as a reader of bbolt's
// does, so that it never sees another process's commit half written; a lock
// held longer than ctx allows is the same clear error as bbolt's timeout.
func (s *Store) checkFile(ctx context.Context) error {
	if _, err := os.Stat(s.path); err != nil {
		return nil
	}
	f, err := filelock.Lock(ctx, s.path, filelock.Shared)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("store file %s is locked by another process for more than %s; is another sandbox-mcp using this --state-dir and stuck?", s.path, s.timeout)
	case err != nil:
		return nil
	}
	defer func() { _ = filelock.Unlock(f) }()
	fi, err := f.Stat()
	if err != nil {
		return nil
	}
	if fi.Size() == 0 {
		return fmt.Errorf("%w: the file is empty", errCorrupt)
	}
	if reason := damage(f, fi.Size()); reason != "" {
		return fmt.Errorf("%w: %s (%d bytes)", errCorrupt, reason, fi.Size())
	}
	return nil
}

// damage says what is wrong with the bbolt file r of size bytes, or "".
func damage(r io.ReaderAt, size int64) string {
	readPage := func(off int64) []byte {
		buf := make([]byte, boltPageHeaderSize+boltMetaSize)
		n, _ := r.ReadAt(buf, off)
		return buf[:n]
	}
	var metas []boltMeta
	meta0, ok0 := parseBoltMeta(readPage(0))
	if ok0 {
		metas = append(metas, meta0)
	}
	// The second meta page is one page in: at meta0's page size, or, when
	// page 0 is damaged, wherever bbolt's probing finds it.
	offsets := []int64{int64(meta0.pageSize)}
	if !ok0 {
		offsets = offsets[:0]
		for i := 0; i <= 14; i++ {
			offsets = append(offsets, 1024<<i)
		}
	}
	for _, off := range offsets {
		if off <= 0 || off >= size {
			continue
		}
		if m, ok := parseBoltMeta(readPage(off)); ok {
			metas = append(metas, m)
			break
		}
	}
	if len(metas) == 0 {
		return "no valid meta page"
	}
	m := metas[0]
	if len(metas) == 2 && metas[1].txid > m.txid {
		m = metas[1]
	}
	switch {
	case m.pageSize < 512 || m.pageSize > 1<<30:
		return fmt.Sprintf("page size %d in the meta page", m.pageSize)
	case size < 2*int64(m.pageSize):
		return fmt.Sprintf("shorter than its two meta pages of %d bytes", m.pageSize)
	case m.pgid < 2 || m.pgid > uint64(size)/m.pageSize:
		return fmt.Sprintf("truncated: the meta page says %d pages of %d bytes are in use", m.pgid, m.pageSize)
	case m.root >= m.pgid:
		return fmt.Sprintf("the root page %d is beyond the %d pages in use", m.root, m.pgid)
	case m.freelist != boltNoFreelist && m.freelist >= m.pgid:
		return fmt.Sprintf("the freelist page %d is beyond the %d pages in use", m.freelist, m.pgid)
	}
	if m.freelist != boltNoFreelist {
		// bbolt reads the freelist at open, overflow pages included.
		header := make([]byte, boltPageHeaderSize)
		if _, err := r.ReadAt(header, int64(m.freelist*m.pageSize)); err != nil {
			return "the freelist page cannot be read"
		}
		if overflow := uint64(binary.NativeEndian.Uint32(header[12:])); m.freelist+overflow >= m.pgid {
			return fmt.Sprintf("the freelist (page %d and %d more) runs beyond the %d pages in use", m.freelist, overflow, m.pgid)
		}
	}
	return ""
}
