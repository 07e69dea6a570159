package tqprom

import "errors"

// Sentinel errors. Match them with errors.Is.
var (
	// ErrInvalid: a bad option, or a Watch of a nil client, an empty
	// partition or task name, or a nil task.
	ErrInvalid = errors.New("tqprom: invalid argument")
	// ErrWatchLimit: a Watch or WatchTask that would take the collector
	// past its label sets (see WithWatchLimit); nothing was changed.
	ErrWatchLimit = errors.New("tqprom: watch limit reached")
)
