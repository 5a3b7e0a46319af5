package docker

import "golang.org/x/sys/unix"

// linkNoFollow hard-links oldname as newname; a symbolic link is linked
// itself, never followed (linkat without AT_SYMLINK_FOLLOW).
func linkNoFollow(oldname, newname string) error {
	return unix.Linkat(unix.AT_FDCWD, oldname, unix.AT_FDCWD, newname, 0)
}
