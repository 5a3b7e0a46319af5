package docker

import "fmt"

// diskSupport says whether the storage driver (with its status pairs from
// the engine's info) can cap a container's writable layer (--storage-opt
// size): overlay2 only on xfs, and then only when it is mounted with
// pquota, which the engine checks at create (Create falls back and says so
// when it refuses); btrfs, zfs, devicemapper and windowsfilter can. It
// returns a description of the driver, and why not.
func diskSupport(driver string, status [][2]string) (desc string, ok bool, why string) {
	backing := ""
	for _, kv := range status {
		if kv[0] == "Backing Filesystem" {
			backing = kv[1]
		}
	}
	desc = driver
	if backing != "" {
		desc += " on " + backing
	}
	switch driver {
	case "btrfs", "zfs", "devicemapper", "windowsfilter":
		return desc, true, ""
	case "overlay2":
		if backing == "xfs" {
			return desc, true, ""
		}
	}
	return desc, false, fmt.Sprintf("the engine's storage driver (%s) cannot cap a container's disk: that needs overlay2 on xfs mounted with pquota (or btrfs, zfs, devicemapper)", desc)
}
