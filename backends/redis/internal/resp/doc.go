// Package resp is the redis engine's own connections to a standalone
// server: a bounded pool of plain RESP2 connections dialled and
// authenticated as a go-redis client's would be (its Dialer, AUTH from its
// credentials, SELECT of its DB), pipelined request building, and reply
// readers, among them one that reads a bulk reply into memory the caller
// gives and one for a MULTI/EXEC transaction's replies.
//
// The engine (package backends/redis) decides which commands to send and
// in what rounds; this package moves the bytes. Every request a Pool runs
// goes through the go-redis hooks it was given, as go-redis's own
// traffic does: see Pool.Do.
//
// Memory a Pool keeps: each idle connection holds a 64 KiB read buffer
// and its last request buffer, which is let go rather than kept when it
// grew past MaxRequestBuffer; at most Config.Size connections are open.
package resp
