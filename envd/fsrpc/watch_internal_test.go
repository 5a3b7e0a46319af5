package fsrpc

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/sandbox-mcp/sandbox-mcp/proto/filesystem"
)

func TestPollerBufferCap(t *testing.T) {
	p := &poller{id: "w1", limit: 3}
	for i := range 5 {
		p.add(watchItem{event: &filesystem.FilesystemEvent{Name: string(rune('a' + i))}})
	}
	events, err := p.drain()
	if err != nil || len(events) != 3 || events[2].GetName() != "c" {
		t.Fatalf("first drain = %v, %v; want a, b, c", events, err)
	}
	// Events arriving after the loss wait until the loss is reported.
	p.add(watchItem{event: &filesystem.FilesystemEvent{Name: "f"}})
	_, err = p.drain()
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "2 events past its buffer of 3") || !strings.Contains(err.Error(), "'w1'") {
		t.Fatalf("second drain error = %v", err)
	}
	events, err = p.drain()
	if err != nil || len(events) != 1 || events[0].GetName() != "f" {
		t.Fatalf("third drain = %v, %v; want f", events, err)
	}
	events, err = p.drain()
	if err != nil || len(events) != 0 {
		t.Fatalf("fourth drain = %v, %v; want nothing", events, err)
	}
}

func TestPollerKernelOverflow(t *testing.T) {
	p := &poller{id: "w2", limit: 10}
	p.add(watchItem{lost: true})
	_, err := p.drain()
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "kernel event queue overflowed") {
		t.Fatalf("drain error = %v", err)
	}
	if events, err := p.drain(); err != nil || len(events) != 0 {
		t.Fatalf("after report: %v, %v", events, err)
	}
}

func TestNetworkFSName(t *testing.T) {
	for magic, want := range map[uint32]string{
		unix.NFS_SUPER_MAGIC:  "nfs",
		unix.CIFS_SUPER_MAGIC: "cifs",
		unix.SMB2_SUPER_MAGIC: "smb2",
		unix.FUSE_SUPER_MAGIC: "fuse",
	} {
		if got, ok := networkFSName(magic); !ok || got != want {
			t.Errorf("networkFSName(%#x) = %q, %v; want %q", magic, got, ok, want)
		}
	}
	for _, magic := range []uint32{unix.EXT4_SUPER_MAGIC, unix.TMPFS_MAGIC, unix.OVERLAYFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC} {
		if got, ok := networkFSName(magic); ok {
			t.Errorf("networkFSName(%#x) = %q, want local", magic, got)
		}
	}
	if name, ok := networkFS(t.TempDir()); ok {
		t.Errorf("the test temp dir counts as network filesystem %q", name)
	}
}

func TestKeepaliveInterval(t *testing.T) {
	for header, want := range map[string]time.Duration{
		"":    DefaultKeepalive,
		"50":  50 * time.Second,
		"0":   DefaultKeepalive,
		"-3":  DefaultKeepalive,
		"abc": DefaultKeepalive,
		"1.5": DefaultKeepalive,
	} {
		h := http.Header{}
		if header != "" {
			h.Set(KeepaliveHeader, header)
		}
		if got := keepaliveInterval(h); got != want {
			t.Errorf("keepaliveInterval(%q) = %v, want %v", header, got, want)
		}
	}
}
