package yuanrong_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/yuanrong"
)

// "yuanrong://" opens an in-process datasystem: a Local engine with no
// MetaStore of its own.
func TestOpenLocal(t *testing.T) {
	eng, err := backends.Open(t.Context(), "yuanrong://?put_keys_limit=2&get_clear_keys_limit=3")
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Data.Close()
	if _, ok := eng.Data.(*yuanrong.Backend); !ok || !eng.Local || eng.Meta != nil {
		t.Fatalf("engine %+v, want a Local *yuanrong.Backend without a MetaStore", eng)
	}
	if _, ok := eng.Data.(backends.Stager); !ok {
		t.Fatal("the Backend does not stage")
	}
}

// A datasystem other processes share cannot be opened by URL: the error
// says so (ErrInvalid) and why (ErrNoSDK). Bad parameters are ErrInvalid.
func TestOpenRejects(t *testing.T) {
	ctx := t.Context()
	for _, u := range []string{"yuanrong://10.0.0.1:31501", "yuanrong:///var/run/ds.sock"} {
		_, err := backends.Open(ctx, u)
		if !errors.Is(err, yuanrong.ErrNoSDK) || !errors.Is(err, backends.ErrInvalid) || !errors.Is(err, yuanrong.ErrInvalid) {
			t.Errorf("%s: %v, want ErrNoSDK and ErrInvalid", u, err)
		}
	}
	for _, u := range []string{"yuanrong://?put_keys_limit=0", "yuanrong://?put_keys_limit=x", "yuanrong://?workers=3", "yuanrong://?put_keys_limit=2&put_keys_limit=3"} {
		if _, err := backends.Open(ctx, u); !errors.Is(err, backends.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", u, err)
		}
	}
	// A parameter given twice is named, not settled by its last value.
	if _, err := backends.Open(ctx, "yuanrong://?get_clear_keys_limit=2&get_clear_keys_limit=3"); err == nil || !strings.Contains(err.Error(), `"get_clear_keys_limit" given twice`) {
		t.Errorf("a repeated parameter: %v", err)
	}
}
