package tqprom

// unavailable holds the sentinels of an engine server that could not be
// reached, for the "unavailable" class. tq defines none yet; its own
// (tq.ErrUnavailable) belongs here when it does. Engine packages' errors
// (redis.ErrUnavailable) are not listed: importing an engine here would
// register it, and link its client, in every program that imports tqprom.
var unavailable []error
