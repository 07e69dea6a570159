package backendtest

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// newNonce distinguishes the keys of one Run or RunMeta call from any other
// call's, so a server kept between test runs never shows the suite old data.
func newNonce() string {
	return "bt" + strconv.FormatUint(rand.Uint64(), 36)
}

// prefix is the key (or partition) prefix of the subtest t within the call
// with nonce. Characters other than letters, digits, '.', '_' and '-' become
// '_', so the prefix is safe as part of a file name or a Redis key.
func prefix(nonce string, t *testing.T) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, t.Name())
	return nonce + "/" + name + "/"
}

// value returns size deterministic pseudo-random bytes for key; never nil.
func value(key string, size int) []byte {
	b := make([]byte, size)
	seed := sha256.Sum256([]byte(key + "#" + strconv.Itoa(size)))
	_, _ = rand.NewChaCha8(seed).Read(b)
	return b
}

// sizes returns the lengths of values.
func sizes(values [][]byte) []int {
	out := make([]int, len(values))
	for i, v := range values {
		out[i] = len(v)
	}
	return out
}

// runWorkers runs worker(0..n-1) on n goroutines, waits for all of them and
// reports each error (named by worker) on t.
func runWorkers(t *testing.T, n int, worker func(w int) error) {
	t.Helper()
	errs := make(chan error, n)
	for w := range n {
		go func() {
			err := worker(w)
			if err != nil {
				err = fmt.Errorf("worker %d: %w", w, err)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
