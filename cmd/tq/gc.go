package main

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// A tq server's heap is mostly its partitions' metadata, live for as long
// as their rows are held, and Go's collector marks all of it at every
// cycle: with the default GOGC of 100, a cycle each time the server has
// allocated as much again as it holds, a fifth or more of its CPU per
// claim. serveGOGC makes a cycle four times rarer, for a heap that peaks
// at up to five times the live metadata rather than twice; serveMemLimit
// of the memory the process may use (its cgroup's limit, else the
// machine's) is the ceiling past which the collector runs as often as it
// must to stay under it. An operator's GOGC or GOMEMLIMIT (Go's own
// variables) is kept as given.
const (
	serveGOGC     = 400
	serveMemLimit = 0.75
)

// tuneGC sets the collector for a tq server as above, where getenv does
// not give GOGC or GOMEMLIMIT, reading the memory the process may use
// from the files under root ("/" but in tests); it returns what it chose,
// for the line the server writes before it says it is serving.
func tuneGC(getenv func(string) string, root string) string {
	var said []string
	if getenv("GOGC") == "" {
		debug.SetGCPercent(serveGOGC)
		said = append(said, fmt.Sprintf("GOGC=%d", serveGOGC))
	} else {
		said = append(said, "GOGC="+getenv("GOGC")+" (set)")
	}
	if getenv("GOMEMLIMIT") == "" {
		if mem, from := memoryFor(root); mem > 0 {
			limit := int64(float64(mem) * serveMemLimit)
			debug.SetMemoryLimit(limit)
			said = append(said, fmt.Sprintf("GOMEMLIMIT=%s (%.0f%% of %s, %s)", bytesText(limit), serveMemLimit*100, bytesText(mem), from))
		}
	} else {
		said = append(said, "GOMEMLIMIT="+getenv("GOMEMLIMIT")+" (set)")
	}
	return strings.Join(said, " ")
}

// memoryFor returns the memory a process under root may use, and what
// says so: its cgroup's limit (v2's memory.max, v1's
// memory.limit_in_bytes) where one is set below the machine's memory,
// else the machine's (/proc/meminfo's MemTotal); 0 if neither reads.
func memoryFor(root string) (int64, string) {
	total := int64(0)
	if f, err := os.Open(root + "/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if kb, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
				if err == nil && n > 0 {
					total = n << 10
				}
				break
			}
		}
		_ = f.Close()
	}
	limit := int64(0)
	for _, c := range cgroupLimitFiles(root) {
		b, err := os.ReadFile(c)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err == nil && n > 0 && (limit == 0 || n < limit) {
			limit = n
		}
	}
	if limit > 0 && (total == 0 || limit < total) {
		return limit, "the cgroup's limit"
	}
	if total > 0 {
		return total, "the machine's memory"
	}
	return 0, ""
}

// cgroupLimitFiles are the files under root that may bound the process's
// memory: for cgroup v2 (memory.max) and v1 (memory.limit_in_bytes), its
// own cgroup's, as /proc/self/cgroup names it, and every ancestor's up to
// the hierarchy's mount, whose least limit is the one that holds. A
// process in a sub-cgroup of the host's hierarchy (a systemd service's
// MemoryMax=) finds its limit in its own directory, not the root's; one in
// a container whose cgroup is mounted as the root (a cgroup namespace,
// v1's bind mount) finds it at the mount, where its path ends.
func cgroupLimitFiles(root string) []string {
	v2, v1 := "/", "/"
	if b, err := os.ReadFile(root + "/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			id, rest, ok := strings.Cut(line, ":")
			ctrls, p, ok2 := strings.Cut(rest, ":")
			switch {
			case !ok || !ok2:
			case id == "0" && ctrls == "":
				v2 = p
			case slices.Contains(strings.Split(ctrls, ","), "memory"):
				v1 = p
			}
		}
	}
	var files []string
	for _, h := range []struct{ mount, cgroup, file string }{
		{"/sys/fs/cgroup", v2, "memory.max"},
		{"/sys/fs/cgroup/memory", v1, "memory.limit_in_bytes"},
	} {
		for p := path.Clean("/" + h.cgroup); ; p = path.Dir(p) {
			files = append(files, root+path.Join(h.mount, p, h.file))
			if p == "/" {
				break
			}
		}
	}
	return files
}
