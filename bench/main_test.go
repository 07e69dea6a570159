package main

import (
	"os"
	"testing"
)

// TestMain lets the sweep's process arm run this test binary as a
// consumer (see runChild), as it runs the bench binary.
func TestMain(m *testing.M) {
	if child, code := runChild(); child {
		os.Exit(code)
	}
	os.Exit(m.Run())
}
