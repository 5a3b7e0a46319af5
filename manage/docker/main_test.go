package docker

// Test helpers: a provider on the real engine (DOCKER_HOST or the default
// socket), the lean envd built from this tree, and a test image imported
// from the host's static busybox (no registry is needed).

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdclient"
	"github.com/sandbox-mcp/sandbox-mcp/envd/envdtest"
	"github.com/sandbox-mcp/sandbox-mcp/internal/testenv"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// failGuard bounds waits that only last that long when something is broken.
const failGuard = 60 * time.Second

// busyboxPath is the static busybox the test image is made of (Debian's
// busybox-static package).
const busyboxPath = "/bin/busybox"

// engine returns a client of the test engine, ending the test through
// testenv.Missing when none answers.
func engine(t testing.TB) *client.Client {
	t.Helper()
	host := ResolveHost("")
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

// testImage returns the tag of a minimal image holding the host's static
// busybox and its applets (sh, sleep, ping, ...), imported once per busybox
// binary: the tag names its content, so later runs reuse it.
func testImage(t testing.TB, cli *client.Client) string {
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

// newProvider returns a provider on the test engine with the test image as
// its default, a new short state directory and the lean envd built from this
// tree; every sandbox it made is removed when the test ends.
func newProvider(t testing.TB, mod func(*Config)) *Provider {
	t.Helper()
	cli := engine(t)
	cfg := Config{
		StateDir:   envdtest.ShortTempDir(t),
		Image:      testImage(t, cli),
		EnvdBinary: envdtest.LeanBinary(t),
		Logger:     quiet,
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), failGuard)
		defer cancel()
		sbs, _ := p.List(ctx)
		for _, sb := range sbs {
			_ = p.Kill(ctx, sb.ID)
		}
		_ = p.Close(ctx)
	})
	return p
}

// create makes a sandbox with cfg and returns it with a client of its envd.
func create(t testing.TB, p *Provider, cfg manage.SandboxConfig) (manage.Sandbox, *envdclient.Client) {
	t.Helper()
	sb, err := p.Create(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sb, dial(t, p, sb.ID)
}

// dial returns a client of sandbox id's envd through Endpoint.
func dial(t testing.TB, p *Provider, id string) *envdclient.Client {
	t.Helper()
	ep, err := p.Endpoint(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	c, err := envdclient.New(ep.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func sh(script string) envdclient.Command {
	return envdclient.Command{Cmd: "/bin/sh", Args: []string{"-c", script}}
}

// run runs script in the sandbox and returns its result, failing the test on
// an RPC error.
func run(t testing.TB, c *envdclient.Client, script string) *envdclient.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), failGuard)
	defer cancel()
	res, err := c.Run(ctx, sh(script), envdclient.RunOptions{})
	if err != nil {
		t.Fatalf("run %q: %v", script, err)
	}
	return res
}

func stdout(res *envdclient.Result) string { return string(res.Stdout.Bytes()) }
