package file

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/backends"
)

// A parameter given twice is an error naming it, as on redis://: which
// of the two was meant cannot be told.
func TestParseURLRepeatedParam(t *testing.T) {
	for _, raw := range []string{
		"file:///d?sync=always&sync=never",
		"file:///d?checkpoint=1MiB&checkpoint=1MiB",
		"file:///d?sync=never&checkpoint=1MiB&sync=never",
		"file:tq-job?sync=always&sync=",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = ParseURL(u)
		if !errors.Is(err, backends.ErrInvalid) || !strings.Contains(err.Error(), "given twice") {
			t.Errorf("%s: %v, want ErrInvalid naming the parameter given twice", raw, err)
		}
	}
}
