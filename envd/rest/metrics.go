//go:build linux

package rest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Metrics is the body of GET /metrics (E2B's envd schema). Memory and disk
// sizes are bytes except the _mib fields.
type Metrics struct {
	Timestamp int64 `json:"ts"` // unix seconds
	CPUCount  int   `json:"cpu_count"`
	// CPUUsedPct is the busy share of all CPUs, in percent, since the
	// previous GET /metrics (since boot on the first call), from /proc/stat.
	CPUUsedPct float64 `json:"cpu_used_pct"`
	MemTotal   uint64  `json:"mem_total"`
	// MemUsed is MemTotal minus MemAvailable from /proc/meminfo.
	MemUsed uint64 `json:"mem_used"`
	// MemCache is the page cache plus reclaimable slab (Cached +
	// SReclaimable), as gopsutil, which E2B's envd uses, reports it.
	MemCache    uint64 `json:"mem_cache"`
	MemTotalMiB uint64 `json:"mem_total_mib"`
	MemUsedMiB  uint64 `json:"mem_used_mib"`
	// DiskUsed and DiskTotal describe the filesystem holding the root
	// directory (the workspace), from statfs.
	DiskUsed  uint64 `json:"disk_used"`
	DiskTotal uint64 `json:"disk_total"`
}

func (s *server) metrics(w http.ResponseWriter) {
	m, err := s.collectMetrics()
	if err != nil {
		s.log.Error("collect metrics", "error", err)
		WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, m)
}

func (s *server) collectMetrics() (*Metrics, error) {
	m := &Metrics{Timestamp: time.Now().Unix(), CPUCount: runtime.NumCPU()}
	pct, err := s.cpu.sample()
	if err != nil {
		return nil, err
	}
	m.CPUUsedPct = pct

	mem, err := readMeminfo("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	available, ok := mem["MemAvailable"]
	if !ok { // kernels before 3.14
		available = mem["MemFree"] + mem["Buffers"] + mem["Cached"]
	}
	m.MemTotal = mem["MemTotal"]
	m.MemUsed = m.MemTotal - min(available, m.MemTotal)
	m.MemCache = mem["Cached"] + mem["SReclaimable"]
	m.MemTotalMiB = m.MemTotal >> 20
	m.MemUsedMiB = m.MemUsed >> 20

	var st unix.Statfs_t
	if err := unix.Statfs(s.paths.Root(), &st); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", s.paths.Root(), err)
	}
	bsize := uint64(st.Bsize)
	m.DiskTotal = st.Blocks * bsize
	m.DiskUsed = (st.Blocks - st.Bfree) * bsize
	return m, nil
}

// readMeminfo returns /proc/meminfo's fields in bytes.
func readMeminfo(path string) (map[string]uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) > 1 && fields[1] == "kB" {
			n <<= 10
		}
		out[name] = n
	}
	if _, ok := out["MemTotal"]; !ok {
		return nil, fmt.Errorf("%s has no MemTotal", path)
	}
	return out, nil
}

// cpuSampler computes CPU use between calls from /proc/stat's "cpu" line.
type cpuSampler struct {
	mu                sync.Mutex
	lastBusy, lastAll uint64
}

// sample returns the busy percentage since the previous call (since boot
// on the first), rounded to two decimals.
func (c *cpuSampler) sample() (float64, error) {
	busy, all, err := readCPUStat("/proc/stat")
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	dBusy, dAll := busy-c.lastBusy, all-c.lastAll
	if busy < c.lastBusy || all <= c.lastAll {
		dBusy, dAll = 0, 0 // no time passed, or counters went backwards
	}
	c.lastBusy, c.lastAll = busy, all
	if dAll == 0 {
		return 0, nil
	}
	return math.Round(float64(dBusy)/float64(dAll)*10000) / 100, nil
}

// readCPUStat returns busy and total jiffies over all CPUs. Idle and iowait
// count as idle; guest time is already inside user and nice.
func readCPUStat(path string) (busy, all uint64, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0, errors.New("unexpected first line in " + path)
	}
	var v [8]uint64
	for i := 1; i < len(fields) && i <= len(v); i++ {
		n, err := strconv.ParseUint(fields[i], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", path, err)
		}
		v[i-1] = n
	}
	for _, n := range v {
		all += n
	}
	idle := v[3] + v[4]
	return all - idle, all, nil
}
