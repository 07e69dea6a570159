package backends_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/backends"
	_ "github.com/tqgo/tqgo/backends/memory" // memory://
)

// TestOpenURLWithoutScheme: a bare host:port (what an operator types for
// Redis) says the URL has no scheme and lists the registered ones, instead
// of net/url's "first path segment in URL cannot contain colon" or, for
// "localhost:6379/0", an unknown scheme "localhost".
func TestOpenURLWithoutScheme(t *testing.T) {
	for _, raw := range []string{
		"127.0.0.1:6379",
		"localhost:6379/0",
		"localhost:6379",
		"redis-host",
		"[::1]:6379",
		"u:secret@10.0.0.5:6379/0",
		"",
	} {
		_, err := backends.Open(t.Context(), raw)
		if !errors.Is(err, backends.ErrInvalid) || errors.Is(err, backends.ErrUnknownScheme) {
			t.Errorf("Open(%q): %v, want ErrInvalid alone", raw, err)
			continue
		}
		msg := err.Error()
		for _, want := range []string{"backends: URL ", "has no scheme", "redis://host:port/db", "registered schemes: ", "memory"} {
			if !strings.Contains(msg, want) {
				t.Errorf("Open(%q): %q lacks %q", raw, msg, want)
			}
		}
		if strings.Contains(msg, "secret") {
			t.Errorf("Open(%q): %q shows the password", raw, msg)
		}
	}
	// A scheme nobody registered is still that.
	for _, raw := range []string{"nosuch://h:1/0", "nosuch:thing"} {
		if _, err := backends.Open(t.Context(), raw); !errors.Is(err, backends.ErrUnknownScheme) {
			t.Errorf("Open(%q): %v, want ErrUnknownScheme", raw, err)
		}
	}
}
