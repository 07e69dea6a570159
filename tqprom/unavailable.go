package tqprom

import "github.com/tqgo/tqgo/tq"

// unavailable holds the sentinels of an engine server that could not be
// reached, for the "unavailable" class.
var unavailable = []error{tq.ErrUnavailable}
