//go:build !linux

package docker

import "errors"

// linkNoFollow refuses: the socket transport, its only user, needs a Linux
// host (New refuses it elsewhere).
func linkNoFollow(string, string) error {
	return errors.New("the socket transport needs a Linux host")
}
