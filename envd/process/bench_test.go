//go:build linux

package process

import (
	"os/exec"
	"strconv"
	"testing"
)

func BenchmarkStartTrue(b *testing.B) {
	tab := NewTable(TableOptions{})
	defer tab.Close()
	for b.Loop() {
		p, sub, err := tab.Start(Spec{Config: Config{Cmd: "true"}, Env: testEnv})
		if err != nil {
			b.Fatal(err)
		}
		sub.Close()
		p.Wait()
	}
}

func BenchmarkExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStdout256MiB(b *testing.B) {
	const total = 256 << 20
	tab := NewTable(TableOptions{})
	defer tab.Close()
	b.SetBytes(total)
	for b.Loop() {
		_, sub, err := tab.Start(Spec{Config: Config{Cmd: "head", Args: []string{"-c", strconv.Itoa(total), "/dev/zero"}}, Env: testEnv})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for c := range sub.Chunks() {
			n += len(c.Bytes())
			c.Release()
		}
		sub.Close()
		if n != total {
			b.Fatalf("got %d bytes", n)
		}
	}
}
