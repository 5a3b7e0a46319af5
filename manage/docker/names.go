package docker

// The provider's names and defaults, on every platform: the server's flags
// name them even where the provider itself cannot run (it needs a Linux
// host in this version; see the package doc).

// Name is the provider's name.
const Name = "docker"

// Isolation is what Sandbox.Isolation says of a docker sandbox.
const Isolation = "docker"

// DefaultImage is the image sandboxes run when neither Config.Image nor the
// sandbox's Template names one: Debian's slim image (about 75 MB), which has
// a shell and apt. It must be on the engine already (docker pull it once):
// the provider never pulls.
const DefaultImage = "debian:bookworm-slim"

// DefaultHost is the engine's address when neither Config.Host nor
// DOCKER_HOST gives one.
const DefaultHost = "unix:///var/run/docker.sock"
