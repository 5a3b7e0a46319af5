package docker

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// DefaultHost is the usual engine address on Linux, the last resort of
// ResolveHost there.
const DefaultHost = "unix:///var/run/docker.sock"

// windowsPipe is Docker Desktop's engine on Windows.
const windowsPipe = "npipe:////./pipe/docker_engine"

// CandidateHosts lists the engine addresses where an engine usually
// listens on goos, most likely first: /var/run/docker.sock on Linux; on
// macOS Docker Desktop's ~/.docker/run/docker.sock, colima's
// ~/.colima/default/docker.sock, then /var/run/docker.sock (Docker
// Desktop's compatibility link, OrbStack's); on Windows Docker Desktop's
// named pipe. home is the user's home directory ("" when unknown).
func CandidateHosts(goos, home string) []string {
	switch goos {
	case "windows":
		return []string{windowsPipe}
	case "darwin":
		var hosts []string
		if home != "" {
			hosts = append(hosts,
				"unix://"+filepath.Join(home, ".docker", "run", "docker.sock"),
				"unix://"+filepath.Join(home, ".colima", "default", "docker.sock"))
		}
		return append(hosts, DefaultHost)
	}
	return []string{DefaultHost}
}

// ResolveHost returns the engine address New uses for host: host itself,
// else DOCKER_HOST, else the first of CandidateHosts whose socket exists,
// else the first candidate.
func ResolveHost(host string) string {
	if host != "" {
		return host
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	home, _ := os.UserHomeDir()
	hosts := CandidateHosts(runtime.GOOS, home)
	for _, h := range hosts {
		if path, ok := strings.CutPrefix(h, "unix://"); ok {
			if _, err := os.Stat(path); err == nil {
				return h
			}
		}
	}
	return hosts[0]
}
