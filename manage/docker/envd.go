package docker

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandbox-mcp/sandbox-mcp/envd/envdbin"
	"github.com/sandbox-mcp/sandbox-mcp/manage/internal/contentfile"
)

// envdPrefix starts the name of an installed envd binary in
// StateDir/docker/bin, followed by the first 16 hex digits of its SHA-256.
const envdPrefix = "sandbox-envd-"

// installEnvd writes the envd binary containers mount into binDir and
// returns its path: src's content when src is set, else the lean envd this
// binary embeds for arch (the engine's architecture), else the running
// executable when it is a Linux one. It must be a static Linux executable
// for arch (the image brings no libraries of ours). The file is named by its content, so
// a container created earlier still finds its binary after an upgrade; it
// is never replaced in place.
func installEnvd(binDir, src, arch string) (string, error) {
	var data []byte
	what := src
	switch {
	case src != "":
		b, err := os.ReadFile(src)
		if err != nil {
			return "", fmt.Errorf("envd binary: %w", err)
		}
		data = b
	case envdbin.Lookup(arch) != nil:
		data, what = envdbin.Lookup(arch).Data, "the embedded lean envd for linux/"+arch
	default:
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("envd binary: %w", err)
		}
		b, err := os.ReadFile(exe)
		if err != nil {
			return "", fmt.Errorf("envd binary: %w", err)
		}
		data, what = b, exe+" (this binary carries no lean envd: build it with `make build`)"
	}
	if err := checkStatic(data, arch); err != nil {
		return "", fmt.Errorf("envd binary %s cannot run in a container: %w", what, err)
	}
	sum := sha256.Sum256(data)
	dst := filepath.Join(binDir, envdPrefix+hex.EncodeToString(sum[:])[:16])
	if fi, err := os.Lstat(dst); err == nil && fi.Mode().IsRegular() && fi.Size() == int64(len(data)) {
		return dst, nil
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", fmt.Errorf("envd binary: %w", err)
	}
	if _, err := contentfile.Write(binDir, envdPrefix, bytes.NewReader(data)); err != nil {
		return "", fmt.Errorf("envd binary: install in %s: %w", binDir, err)
	}
	return dst, nil
}

// elfMachines maps GOARCH values to ELF machines.
var elfMachines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386, "arm": elf.EM_ARM,
	"riscv64": elf.EM_RISCV, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390,
}

// errNotStatic is why a dynamically linked envd is refused.
var errNotStatic = errors.New("it is dynamically linked (it names a program interpreter); build it with CGO_ENABLED=0")

// checkStatic reports whether data is an ELF executable for arch with no
// program interpreter (statically linked).
func checkStatic(data []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	defer func() { _ = f.Close() }()
	if want, ok := elfMachines[arch]; ok && f.Machine != want {
		return fmt.Errorf("it is built for %s, and the docker engine runs %s", f.Machine, arch)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return errNotStatic
		}
	}
	return nil
}
