//go:build linux

package envdclient_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbox-mcp/sandbox-mcp/envd/daemon"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
)

func TestFilesystem(t *testing.T) {
	forEachNetwork(t, func(t *testing.T, d *envdtest.Daemon, c *envdclient.Client) {
		ctx := t.Context()
		created, err := c.MakeDir(ctx, "a/b")
		if err != nil || !created {
			t.Fatalf("MakeDir = %v, %v", created, err)
		}
		if created, err := c.MakeDir(ctx, "a/b"); err != nil || created {
			t.Fatalf("MakeDir of an existing dir = %v, %v; want false, nil", created, err)
		}
		if err := c.Upload(ctx, "a/b/f.txt", strings.NewReader("hello"), envdclient.UploadOptions{Metadata: map[string]string{"k": "v"}}); err != nil {
			t.Fatal(err)
		}
		e, err := c.Stat(ctx, "a/b/f.txt")
		if err != nil || e.Type != envdclient.TypeFile || e.Size != 5 || e.Path != filepath.Join(d.Root, "a/b/f.txt") {
			t.Fatalf("Stat = %+v, %v", e, err)
		}
		entries, err := c.ListDir(ctx, "a", 2)
		if err != nil || len(entries) != 2 {
			t.Fatalf("ListDir depth 2 = %+v, %v", entries, err)
		}
		moved, err := c.Move(ctx, "a/b/f.txt", "c/g.txt")
		if err != nil || moved.Name != "g.txt" {
			t.Fatalf("Move = %+v, %v", moved, err)
		}
		dl, err := c.DownloadRange(ctx, "c/g.txt", 1, 3)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(dl)
		dl.Close()
		if string(got) != "ell" || dl.Size != 5 || dl.Offset != 1 {
			t.Fatalf("range = %q size %d offset %d", got, dl.Size, dl.Offset)
		}
		past, err := c.DownloadRange(ctx, "c/g.txt", 10, -1)
		if err != nil {
			t.Fatal(err)
		}
		if rest, _ := io.ReadAll(past); len(rest) != 0 || past.Size != 5 {
			t.Fatalf("range past the end = %q size %d", rest, past.Size)
		}
		if err := c.Remove(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if err := c.Remove(ctx, "a"); err != nil {
			t.Fatalf("Remove of a missing path = %v; want nil", err)
		}
		if _, err := c.Stat(ctx, "a"); !envdclient.IsNotFound(err) {
			t.Fatalf("Stat after Remove = %v; want not_found", err)
		}
		if _, err := c.Download(ctx, "missing"); !envdclient.IsNotFound(err) {
			t.Fatalf("Download of a missing file = %v; want not_found", err)
		}
	})
}

func TestBigFileRoundTrip(t *testing.T) {
	c := newClient(t, envdtest.Serve(t, "unix", daemon.Config{}).Endpoint)
	ctx := t.Context()
	const size = 50 << 20
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	if err := c.Upload(ctx, "big.bin", bytes.NewReader(data), envdclient.UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	dl, err := c.Download(ctx, "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer dl.Close()
	h := sha256.New()
	n, err := io.Copy(h, dl)
	if err != nil || n != size {
		t.Fatalf("download %d bytes, %v", n, err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
		t.Fatal("sha256 differs after the round trip")
	}
}

func TestWatch(t *testing.T) {
	c := newClient(t, envdtest.Serve(t, "unix", daemon.Config{}).Endpoint)
	ctx := t.Context()
	if _, err := c.MakeDir(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch(ctx, "w", envdclient.WatchOptions{Recursive: true, IncludeEntry: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := c.Upload(ctx, "w/new.txt", strings.NewReader("x"), envdclient.UploadOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended: %v", w.Err())
			}
			// Uploads land under a temporary name and are renamed into place.
			if ev.Name == "new.txt" && (ev.Type == envdclient.EventCreate || ev.Type == envdclient.EventRename || ev.Type == envdclient.EventWrite) {
				return
			}
		case <-timeout:
			t.Fatal("no event for new.txt")
		}
	}
}
