package redis

import "testing"

// TestFreeListBound: the free lists never hold more than maxFreeBytes,
// however many buffers come back.
func TestFreeListBound(t *testing.T) {
	free.mu.Lock()
	saved, savedBytes := free.byClass, free.bytes
	free.byClass, free.bytes = nil, 0
	free.mu.Unlock()
	t.Cleanup(func() {
		free.mu.Lock()
		free.byClass, free.bytes = saved, savedBytes
		free.mu.Unlock()
	})
	const size = 4 << 20
	// One buffer returned many times counts as many: the lists account
	// capacity, not distinct memory, and the test need not allocate it.
	one := getBuf(size)
	for range 2*maxFreeBytes/size + 3 {
		putBuf(one)
	}
	free.mu.Lock()
	held, total := free.bytes, 0
	for class, l := range free.byClass {
		total += class * len(l)
	}
	free.mu.Unlock()
	if held > maxFreeBytes || total != held {
		t.Fatalf("free lists hold %d bytes (counted %d), want at most %d", total, held, maxFreeBytes)
	}
	if held < maxFreeBytes-size {
		t.Errorf("free lists hold %d bytes, want them filled to within a buffer of %d", held, maxFreeBytes)
	}
	// A buffer taken from the lists lowers the count by its class.
	b := getBuf(size)
	free.mu.Lock()
	after := free.bytes
	free.mu.Unlock()
	if after != held-cap(b) {
		t.Errorf("after one get the lists hold %d bytes, want %d", after, held-cap(b))
	}
}
