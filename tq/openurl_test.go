package tq_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/tq"
)

// Open of a URL that does not parse (a typo in the port, a stray '%', a
// '/' in the password) keeps the password out of its error, which ends up
// in logs, and the error matches ErrInvalid, as any malformed call's does.
func TestOpenBadURLHidesPassword(t *testing.T) {
	for _, url := range []string{
		"redis://user:hunter2@10.0.0.5:63x9/0",
		"redis://user:hunter2%@10.0.0.5:6379/0",
		"redis://user:hun/ter2@10.0.0.5:63x9/0",
		"redis://:hunter2@[::1:6379/0",
	} {
		c, err := tq.Open(context.Background(), url)
		if err == nil {
			c.Close()
			t.Fatalf("Open(%q) succeeded", url)
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "ter2") {
			t.Errorf("Open of a malformed URL shows the password: %v", err)
		}
		if !errors.Is(err, tq.ErrInvalid) || !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("Open(%q): %v, want ErrInvalid", url, err)
		}
	}
}

// memory:// takes a name and nothing else: a port, path, user or option
// is refused, not ignored.
func TestOpenMemoryRefusesOptions(t *testing.T) {
	for _, url := range []string{"memory://x:1", "memory://?prefix=job1", "memory:///path", "memory://x/path", "memory://u:p@"} {
		c, err := tq.Open(context.Background(), url)
		if err == nil {
			c.Close()
			t.Errorf("Open(%q) succeeded", url)
			continue
		}
		if !errors.Is(err, tq.ErrInvalid) {
			t.Errorf("Open(%q): %v, want ErrInvalid", url, err)
		}
	}
	for _, url := range []string{"", "memory://", "memory:///"} {
		c, err := tq.Open(context.Background(), url)
		if err != nil {
			t.Fatalf("Open(%q): %v", url, err)
		}
		c.Close()
	}
}

// A URL without a scheme is refused, and its password is not shown.
func TestOpenNoSchemeHidesPassword(t *testing.T) {
	_, err := tq.Open(t.Context(), "user:s3cret@127.0.0.1:6379")
	if err == nil || !errors.Is(err, tq.ErrInvalid) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Open of a URL with no scheme: %v, want ErrInvalid without the password", err)
	}
}
