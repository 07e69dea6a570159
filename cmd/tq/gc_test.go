package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// fakeRoot makes a directory with the files memoryFor reads: meminfo's
// MemTotal in kB, and each cgroup file given (path under root: content).
func fakeRoot(t *testing.T, memKB string, cgroup map[string]string) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{}
	for k, v := range cgroup {
		files[k] = v
	}
	if memKB != "" {
		files["proc/meminfo"] = "MemFree:         1000 kB\nMemTotal:       " + memKB + " kB\nBuffers: 1 kB\n"
	}
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestMemoryFor(t *testing.T) {
	const v2, v1 = "sys/fs/cgroup/memory.max", "sys/fs/cgroup/memory/memory.limit_in_bytes"
	for _, c := range []struct {
		name   string
		memKB  string
		cgroup map[string]string
		want   int64
		from   string
	}{
		{"machine", "16384", nil, 16 << 20, "the machine's memory"},
		{"v2 limit below", "16384", map[string]string{v2: "4194304\n"}, 4 << 20, "the cgroup's limit"},
		{"v2 no limit", "16384", map[string]string{v2: "max\n"}, 16 << 20, "the machine's memory"},
		{"v1 limit below", "16384", map[string]string{v1: "8388608\n"}, 8 << 20, "the cgroup's limit"},
		{"v1 no limit", "16384", map[string]string{v1: "9223372036854771712\n"}, 16 << 20, "the machine's memory"},
		{"cgroup alone", "", map[string]string{v2: "4194304"}, 4 << 20, "the cgroup's limit"},
		{"nothing", "", nil, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, from := memoryFor(fakeRoot(t, c.memKB, c.cgroup))
			if got != c.want || from != c.from {
				t.Fatalf("memoryFor = %d, %q; want %d, %q", got, from, c.want, c.from)
			}
		})
	}
}

// tuneGC sets GOGC and a memory limit where the environment does not,
// and keeps the operator's where it does.
func TestTuneGC(t *testing.T) {
	gogc := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(gogc)
		debug.SetMemoryLimit(limit)
	})
	root := fakeRoot(t, "16777216", map[string]string{"sys/fs/cgroup/memory.max": "8589934592"}) // 16 GiB, cgroup 8 GiB

	said := tuneGC(func(string) string { return "" }, root)
	if got := debug.SetGCPercent(100); got != serveGOGC {
		t.Errorf("GOGC unset: the collector's percent is %d, want %d", got, serveGOGC)
	}
	if got := debug.SetMemoryLimit(-1); got != 6<<30 {
		t.Errorf("GOMEMLIMIT unset: the memory limit is %d, want 6 GiB (3/4 of the cgroup's 8 GiB)", got)
	}
	if want := "GOGC=400 GOMEMLIMIT=6 GiB (75% of 8 GiB, the cgroup's limit)"; said != want {
		t.Errorf("tuneGC said %q, want %q", said, want)
	}

	debug.SetGCPercent(100)
	debug.SetMemoryLimit(1 << 40)
	env := map[string]string{"GOGC": "150", "GOMEMLIMIT": "2GiB"}
	said = tuneGC(func(k string) string { return env[k] }, root)
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC set: the collector's percent changed to %d", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 1<<40 {
		t.Errorf("GOMEMLIMIT set: the memory limit changed to %d", got)
	}
	if !strings.Contains(said, "GOGC=150 (set)") || !strings.Contains(said, "GOMEMLIMIT=2GiB (set)") {
		t.Errorf("tuneGC said %q, want the operator's values named as set", said)
	}
}

// A process in a cgroup below the hierarchy's root (a systemd service with
// MemoryMax=, a container sharing the host's cgroup namespace) has its
// limit in its own cgroup's directory, named by /proc/self/cgroup, or in
// an ancestor's; the root's has none (v2) or no limit (v1).
func TestMemoryForNestedCgroup(t *testing.T) {
	const noLimitV1 = "9223372036854771712\n"
	for _, c := range []struct {
		name   string
		cgroup map[string]string
		want   int64
		from   string
	}{
		{"v2 service", map[string]string{
			"proc/self/cgroup":                                 "0::/system.slice/tq.service\n",
			"sys/fs/cgroup/system.slice/memory.max":            "max\n",
			"sys/fs/cgroup/system.slice/tq.service/memory.max": "4194304\n",
		}, 4 << 20, "the cgroup's limit"},
		{"v2 parent's limit", map[string]string{
			"proc/self/cgroup":             "0::/a/b\n",
			"sys/fs/cgroup/a/memory.max":   "4194304\n",
			"sys/fs/cgroup/a/b/memory.max": "max\n",
		}, 4 << 20, "the cgroup's limit"},
		{"v1 nested", map[string]string{
			"proc/self/cgroup":                                         "9:name=systemd:/\n4:memory:/process_api/x\n1:cpu:/\n0::/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":               noLimitV1,
			"sys/fs/cgroup/memory/process_api/memory.limit_in_bytes":   noLimitV1,
			"sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes": "8388608\n",
		}, 8 << 20, "the cgroup's limit"},
		{"v1 container (its cgroup mounted as the root)", map[string]string{
			"proc/self/cgroup":                           "4:memory:/docker/abc\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "8388608\n",
		}, 8 << 20, "the cgroup's limit"},
		{"v2 nested, no limit", map[string]string{
			"proc/self/cgroup":                    "0::/user.slice/session-1.scope\n",
			"sys/fs/cgroup/user.slice/memory.max": "max\n",
		}, 16 << 20, "the machine's memory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, from := memoryFor(fakeRoot(t, "16384", c.cgroup))
			if got != c.want || from != c.from {
				t.Fatalf("memoryFor = %d, %q; want %d, %q", got, from, c.want, c.from)
			}
		})
	}
}

// tq serve says how it set the collector, before it says it serves; an
// operator's GOGC is kept and said to be theirs.
func TestServeSaysCollector(t *testing.T) {
	t.Setenv("GOGC", "150")
	_, lines := childProc(t, "TQ_SERVE_CHILD", []string{"serve", "-engine", "memory://gc-line", "-listen", freePort(t)})
	waitLine(t, lines, "tq serve: garbage collector: GOGC=150 (set)")
	waitLine(t, lines, "tq serve: serving memory://gc-line")
}
