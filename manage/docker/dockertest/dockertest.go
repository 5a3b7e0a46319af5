//go:build linux

// Package dockertest gives tests a Docker engine and a test image without a
// registry: the engine at DOCKER_HOST (or the default socket), ending the
// test through testenv.Missing when none answers, and a minimal image made
// from the host's static busybox, imported through the Engine API once and
// cached by a tag that names its content.
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
)

// busyboxPath is the static busybox the test image is made of (Debian's
// busybox-static package).
const busyboxPath = "/bin/busybox"

// Engine returns a client of the test engine, ending the test through
// testenv.Missing when none answers.
func Engine(t testing.TB) *client.Client {
	t.Helper()
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = client.DefaultDockerHost
	}
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		_ = cli.Close()
		testenv.Missing(t, "a running docker engine at %s (%v): start dockerd (scripts/test does), or apt-get install docker.io", host, err)
		return nil
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

var (
	imageOnce sync.Once
	imageRef  string
	imageErr  error
)

// BusyboxImage returns the tag of a minimal image holding the host's static
// busybox and its applets (sh, sleep, ping, ...), imported once per busybox
// binary: the tag names its content, so later runs reuse it.
func BusyboxImage(t testing.TB, cli *client.Client) string {
	t.Helper()
	data, err := os.ReadFile(busyboxPath)
	if err != nil {
		testenv.Missing(t, "a static busybox at %s (%v): apt-get install busybox-static", busyboxPath, err)
		return ""
	}
	imageOnce.Do(func() { imageRef, imageErr = importBusybox(cli, data) })
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return imageRef
}

// testImageLayout changes when the image's layout below does, so that a
// changed layout gets a new tag.
const testImageLayout = "1"

func importBusybox(cli *client.Client, data []byte) (string, error) {
	sum := sha256.Sum256(append(data, testImageLayout...))
	ref := "sandbox-mcp-test/busybox:" + hex.EncodeToString(sum[:])[:12]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	}
	list, err := exec.Command(busyboxPath, "--list-full").Output()
	if err != nil {
		return "", fmt.Errorf("busybox --list-full: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	mkdir := func(name string, mode int64) {
		if !dirs[name] {
			dirs[name] = true
			_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode})
		}
	}
	for _, d := range []string{"bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "root", "proc", "sys", "dev"} {
		mkdir(d, 0o755)
	}
	mkdir("tmp", 0o1777)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(data))}); err != nil {
		return "", err
	}
	if _, err := tw.Write(data); err != nil {
		return "", err
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "bin/busybox" {
			continue
		}
		if i := strings.LastIndexByte(applet, '/'); i > 0 {
			mkdir(applet[:i], 0o755)
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: applet, Linkname: "/bin/busybox", Mode: 0o777}); err != nil {
			return "", err
		}
	}
	for name, content := range map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":  "root:x:0:\nnogroup:x:65534:\n",
	} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content))}); err != nil {
			return "", err
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: &buf, SourceName: "-"}, ref, image.ImportOptions{})
	if err != nil {
		return "", fmt.Errorf("import the test image: %w", err)
	}
	out, _ := io.ReadAll(rc)
	_ = rc.Close()
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		return "", fmt.Errorf("import the test image: %v; the engine said %s", err, out)
	}
	return ref, nil
}
