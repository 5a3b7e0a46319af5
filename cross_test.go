//go:build linux

package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdbin"
)

// TestDarwinBinaryCarriesLinuxEnvd cross-builds the server for darwin/arm64
// as `make cross` does and requires it to carry, byte for byte, every lean
// Linux envd this tree embeds (which TestEmbeddedEnvdIsCurrent holds to a
// fresh build); then it cuts the envd for this machine's architecture out of
// the darwin binary and runs it here until it announces itself on
// --ready-fd. Without embedded envds (a tree built without make) it skips,
// or fails under CI=true.
func TestDarwinBinaryCarriesLinuxEnvd(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-builds the server")
	}
	embedded := envdbin.List()
	if envdbin.Lookup(runtime.GOARCH) == nil {
		msg := "no embedded lean envd for linux/" + runtime.GOARCH + ": run make envd"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	server := filepath.Join(dir, "sandbox-mcp-darwin-arm64")
	build := exec.Command("go", "build", "-o", server, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=darwin", "GOARCH=arm64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("GOOS=darwin GOARCH=arm64 go build: %v\n%s", err, out)
	}
	bin, err := os.ReadFile(server)
	if err != nil {
		t.Fatal(err)
	}
	var runnable []byte
	for _, e := range embedded {
		at := bytes.Index(bin, e.Data)
		if at < 0 {
			t.Errorf("the darwin binary does not carry %s (sha256 %s)", e.Name, e.SHA256)
			continue
		}
		if e.Name == envdbin.Name(runtime.GOARCH) {
			runnable = bin[at : at+len(e.Data)]
		}
	}
	if runnable == nil {
		t.FailNow()
	}

	envd := filepath.Join(dir, "sandbox-envd")
	if err := os.WriteFile(envd, runnable, 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer readyR.Close()
	sock := filepath.Join(dir, "envd.sock")
	cmd := exec.Command(envd, "--listen", "unix:"+sock, "--root", root, "--ready-fd", "3")
	cmd.ExtraFiles = []*os.File{readyW}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readyW.Close()
	line, err := bufio.NewReader(readyR).ReadString('\n')
	if err != nil || line != "ready "+sock+"\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the extracted envd did not announce itself: %q, %v\n%s", line, err, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the extracted envd after SIGTERM: %v\n%s", err, stderr.String())
	}
}
