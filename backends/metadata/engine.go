package metadata

import (
	"fmt"

	"github.com/tqgo/tqgo/backends"
)

// Of returns eng's own metadata store, eng.Meta, as a MetaStore: nil when
// eng has none (a shared engine's Log, or a Local engine's in-process
// store, stands for it). It fails with an error wrapping
// backends.ErrInvalid when eng does not pass Engine.Check, or when its
// Meta is not a MetaStore.
func Of(eng backends.Engine) (MetaStore, error) {
	if err := eng.Check(); err != nil {
		return nil, err
	}
	if eng.Meta == nil {
		return nil, nil
	}
	m, ok := eng.Meta.(MetaStore)
	if !ok {
		return nil, fmt.Errorf("%w: the engine's Meta is a %T, not a metadata.MetaStore", backends.ErrInvalid, eng.Meta)
	}
	return m, nil
}
