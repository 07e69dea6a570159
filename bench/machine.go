package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// machineLines describes where and how the numbers were taken.
func machineLines(cfg Config, now time.Time) []string {
	lines := []string{
		fmt.Sprintf("CPU: %s; %d logical cores; GOMAXPROCS %d", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0)),
	}
	if load := loadAvg(); load != "" {
		// Well above the core count means other work shared the machine.
		lines = append(lines, "Load average at start (1, 5, 15 min): "+load)
	}
	if mem := memTotal(); mem != "" {
		lines = append(lines, "Memory: "+mem)
	}
	lines = append(lines,
		fmt.Sprintf("Go: %s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH),
		"Date: "+now.Format("2006-01-02 15:04 MST"))
	if rev := revision(); rev != "" {
		lines = append(lines, "Commit: "+rev)
	}
	if cfg.Command != "" {
		lines = append(lines, "Command: `"+cfg.Command+"`")
	}
	lines = append(lines, fmt.Sprintf("Method: warm-up and calibration per arm, then %d repetitions with the arms interleaved "+
		"(the starting arm rotates); each sample runs its operation for at least %s; medians and min–max over the repetitions; "+
		"every read is checked against what was written.", cfg.Reps, cfg.MinSample))
	return lines
}

func cpuModel() string {
	if v := procField("/proc/cpuinfo", "model name"); v != "" {
		return v
	}
	return runtime.GOARCH + " (model unknown)"
}

func memTotal() string {
	v := procField("/proc/meminfo", "MemTotal")
	var kb int64
	if _, err := fmt.Sscanf(v, "%d kB", &kb); err != nil || kb == 0 {
		return ""
	}
	return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
}

// procField returns the value of the first "key: value" line of a /proc
// file, or "".
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], ", ")
}

// revision is the VCS revision the binary was built from, when the Go
// toolchain stamped it.
func revision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = " (with uncommitted changes)"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}
