package file

import (
	"encoding/json"
	"os"
	"time"
)

// owner is what the holder of a directory's lock writes into its LOCK
// file: who holds it, for another process's refusal to say.
type owner struct {
	PID   int       `json:"pid"`
	Host  string    `json:"host"`
	Since time.Time `json:"since"`
}

// thisOwner is this process's owner record.
func thisOwner() []byte {
	host, _ := os.Hostname()
	b, _ := json.Marshal(owner{PID: os.Getpid(), Host: host, Since: time.Now().UTC()})
	return append(b, '\n')
}

// lockedError is Open's refusal of dir, naming the holder that LOCK (at
// path) names, if it names one.
func lockedError(dir, path string) error {
	e := &LockedError{Dir: dir}
	// The holder writes its record just after it takes the lock: a
	// refusal in between reads none (or a former holder's), so look
	// again a few times for one.
	for try := 0; try < 5; try++ {
		b, err := os.ReadFile(path)
		var o owner
		if err == nil && json.Unmarshal(b, &o) == nil && o.PID > 0 {
			e.PID, e.Host, e.Since = o.PID, o.Host, o.Since
			break
		}
		time.Sleep(time.Millisecond)
	}
	return e
}
