package daemon

// errPlatform is nil: envd serves on Linux.
var errPlatform error
