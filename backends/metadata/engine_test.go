package metadata_test

import (
	"errors"
	"testing"

	"github.com/tqgo/tqgo/backends"
	"github.com/tqgo/tqgo/backends/memory"
	"github.com/tqgo/tqgo/backends/metadata"
)

type closer struct{}

func (closer) Close() error { return nil }

// Of gives an engine's Meta as a MetaStore, nil for none, and refuses an
// engine that fails Check or whose Meta is no MetaStore with ErrInvalid.
func TestOf(t *testing.T) {
	ms := memory.NewMetaStore()
	defer ms.Close()
	if m, err := metadata.Of(backends.Engine{Data: memory.New(), Meta: ms}); err != nil || m != ms {
		t.Errorf("Of(MetaStore) = %v, %v", m, err)
	}
	if m, err := metadata.Of(backends.Engine{Data: memory.New(), Local: true}); err != nil || m != nil {
		t.Errorf("Of(Local, no Meta) = %v, %v", m, err)
	}
	for name, eng := range map[string]backends.Engine{
		"no Store":          {Meta: ms},
		"shared, no Meta":   {Data: memory.New()},
		"Meta no MetaStore": {Data: memory.New(), Meta: closer{}, Local: true},
	} {
		if m, err := metadata.Of(eng); !errors.Is(err, backends.ErrInvalid) || m != nil {
			t.Errorf("Of(%s) = %v, %v; want ErrInvalid", name, m, err)
		}
	}
}
