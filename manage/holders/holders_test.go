package holders_test

import (
	"bufio"
	"os"
	"os/exec"
	"testing"

	"github.com/sandbox-mcp/sandbox-mcp/manage/holders"
)

// Run with SANDBOX_MCP_HOLD_ROOT and SANDBOX_MCP_HOLD_KEY set, the test
// binary is a helper that holds the key, says so on stdout and holds until
// killed.
func TestMain(m *testing.M) {
	if root := os.Getenv("SANDBOX_MCP_HOLD_ROOT"); root != "" {
		d, err := holders.New(root)
		if err != nil {
			os.Exit(2)
		}
		if _, err := d.Hold(os.Getenv("SANDBOX_MCP_HOLD_KEY")); err != nil {
			os.Exit(2)
		}
		os.Stdout.WriteString("holding\n")
		select {}
	}
	os.Exit(m.Run())
}

func others(t *testing.T, d *holders.Dir, key string) bool {
	t.Helper()
	got, err := d.Others(key)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestHoldersCountOthersNotSelf(t *testing.T) {
	root := t.TempDir()
	a, err := holders.New(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := holders.New(root)
	if err != nil {
		t.Fatal(err)
	}
	if others(t, a, "k") {
		t.Fatal("others before anyone holds")
	}
	releaseA, err := a.Hold("k")
	if err != nil {
		t.Fatal(err)
	}
	if others(t, a, "k") {
		t.Fatal("a counts its own hold as another's")
	}
	if !others(t, b, "k") {
		t.Fatal("b does not see a's hold")
	}
	if others(t, b, "other key") {
		t.Fatal("a hold on k counts for another key")
	}
	releaseB, err := b.Hold("k")
	if err != nil {
		t.Fatal(err)
	}
	releaseA()
	releaseA()
	if !others(t, a, "k") || others(t, b, "k") {
		t.Fatal("after a let go, only b should hold")
	}
	releaseB()
	if others(t, a, "k") || others(t, b, "k") {
		t.Fatal("nobody should hold after both let go")
	}
}

// A holder killed with SIGKILL holds nothing: the kernel dropped its lock.
func TestHoldersKilledHolderReleased(t *testing.T) {
	root := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SANDBOX_MCP_HOLD_ROOT="+root, "SANDBOX_MCP_HOLD_KEY=k")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "holding\n" {
		_ = cmd.Process.Kill()
		t.Fatalf("helper: %q, %v", line, err)
	}
	d, err := holders.New(root)
	if err != nil {
		t.Fatal(err)
	}
	if !others(t, d, "k") {
		t.Fatal("the helper's hold is not seen")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if others(t, d, "k") {
		t.Fatal("a killed holder still counts")
	}
}
