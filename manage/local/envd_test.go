//go:build linux

package local

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdbin"
	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// leanEnvd returns the lean envd the tests built as an embedded envd, with
// its hex SHA-256.
func leanEnvd(t *testing.T) *envdbin.Envd {
	t.Helper()
	needBinary(t)
	data, err := os.ReadFile(envdBinary)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return &envdbin.Envd{Name: envdbin.Name(runtime.GOARCH), Data: data, SHA256: hex.EncodeToString(sum[:])}
}

// exeHash is the SHA-256 of the executable that runs a sandbox's envd, as
// seen from inside: the parent of a command is envd.
const exeHash = "sha256sum /proc/$PPID/exe | cut -d' ' -f1"

// TestEmbeddedEnvd checks that a Provider whose Config names no envd binary
// runs the lean envd the binary embeds: written once into StateDir/bin under
// its content hash where the sandbox user reaches it, executed by every
// sandbox's envd process, and written again when removed meanwhile.
func TestEmbeddedEnvd(t *testing.T) {
	e := leanEnvd(t)
	for _, isolation := range []string{IsolationBwrap, IsolationNone} {
		t.Run(isolation, func(t *testing.T) {
			stateDir := newStateDir(t)
			logs := &logBuffer{}
			cfg := Config{StateDir: stateDir, embedded: e, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
			want := filepath.Join(stateDir, "bin", embeddedPrefix+e.SHA256[:16])
			if isolation == IsolationBwrap {
				requireBwrap(t)
				// Probe names it without writing it.
				if pc := Probe(testCtx(t), cfg); pc.EnvdBinary != want || !pc.BwrapUsable {
					t.Errorf("Probe = %+v, want EnvdBinary %s", pc, want)
				}
				if _, err := os.Stat(want); !os.IsNotExist(err) {
					t.Errorf("Probe wrote the embedded envd: %v", err)
				}
			}
			cfg.Isolation = isolation
			p := newProvider(t, cfg)
			if got := p.Capabilities().EnvdBinary; got != want {
				t.Errorf("EnvdBinary = %q, want %q", got, want)
			}
			for path, mode := range map[string]os.FileMode{filepath.Dir(want): 0o711, want: 0o755} {
				if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != mode {
					t.Errorf("%s: %v, %v; want mode %04o", path, fi.Mode(), err, mode)
				}
			}
			if data, err := os.ReadFile(want); err != nil || !bytes.Equal(data, e.Data) {
				t.Errorf("%s does not hold the embedded envd (%d bytes, %v)", want, len(data), err)
			}
			if !strings.Contains(logs.String(), "the lean envd this binary embeds") {
				t.Errorf("New did not say which envd sandboxes run:\n%s", logs)
			}

			c := connectTo(t, p, create(t, p, manage.SandboxConfig{}).ID)
			if got := shOK(t, c, exeHash); got != e.SHA256 {
				t.Errorf("envd inside runs an executable with SHA-256 %s, want the embedded envd's %s", got, e.SHA256)
			}

			// A second Provider reuses the file; one removed meanwhile is
			// written again for the next sandbox.
			fi, err := os.Stat(want)
			if err != nil {
				t.Fatal(err)
			}
			p2 := newProvider(t, Config{StateDir: stateDir, Isolation: isolation, embedded: e})
			if again, err := os.Stat(want); err != nil || !os.SameFile(fi, again) {
				t.Errorf("the second Provider rewrote the embedded envd: %v", err)
			}
			if err := os.Remove(want); err != nil {
				t.Fatal(err)
			}
			shOK(t, c, "true") // the running sandbox is unaffected
			if got := shOK(t, connectTo(t, p2, create(t, p2, manage.SandboxConfig{}).ID), exeHash); got != e.SHA256 {
				t.Errorf("after removal: envd runs %s, want %s", got, e.SHA256)
			}
			if _, err := os.Stat(want); err != nil {
				t.Errorf("the embedded envd was not written again: %v", err)
			}
		})
	}
}

// TestServerBinaryEnvd checks the fallback of a binary that embeds no lean
// envd: sandboxes run the server binary's own `envd` subcommand.
func TestServerBinaryEnvd(t *testing.T) {
	needBinary(t)
	data, err := os.ReadFile(serverBinary)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	p := needBwrap(t, Config{EnvdBinary: serverBinary})
	c := connectTo(t, p, create(t, p, manage.SandboxConfig{}).ID)
	if got := shOK(t, c, exeHash); got != hex.EncodeToString(sum[:]) {
		t.Errorf("envd inside runs an executable with SHA-256 %s, want sandbox-mcp's %x", got, sum)
	}
}

// TestDefaultEnvdBinary checks what a Config without EnvdBinary runs: the
// lean envd this test binary embeds when `make envd` ran before the build,
// else the running executable.
func TestDefaultEnvdBinary(t *testing.T) {
	stateDir := newStateDir(t)
	cfg, err := Config{StateDir: stateDir}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if e := envdbin.Lookup(runtime.GOARCH); e != nil {
		if want := embeddedPath(filepath.Join(stateDir, "bin"), e); cfg.EnvdBinary != want || cfg.embedded != e {
			t.Errorf("EnvdBinary %q (embedded %v), want the embedded envd at %q", cfg.EnvdBinary, cfg.embedded != nil, want)
		}
	} else {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		if exe, _ = filepath.Abs(exe); cfg.EnvdBinary != exe || cfg.embedded != nil {
			t.Errorf("EnvdBinary %q, want the running executable %q", cfg.EnvdBinary, exe)
		}
	}
	// A named binary wins over an embedded envd.
	cfg, err = Config{StateDir: stateDir, EnvdBinary: envdBinary, embedded: &envdbin.Envd{SHA256: "00"}}.withDefaults()
	if err != nil || cfg.EnvdBinary != envdBinary || cfg.embedded != nil {
		t.Errorf("withDefaults = %q, embedded %v, %v", cfg.EnvdBinary, cfg.embedded != nil, err)
	}
}
