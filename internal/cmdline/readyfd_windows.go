package cmdline

import "fmt"

// checkOpen refuses every descriptor: Windows passes handles, not numbered
// descriptors, to child processes, so --ready-fd has nothing to name there.
func checkOpen(fd int) error {
	return fmt.Errorf("--ready-fd %d: inherited descriptors are not supported on windows", fd)
}
