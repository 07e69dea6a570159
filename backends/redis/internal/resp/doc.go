// Package resp is the redis engine's direct connections to a standalone
// server: a bounded pool of plain RESP2 connections dialled and
// authenticated as a go-redis client's would be (see Config), request
// building, and reply readers, among them one that reads a bulk reply
// into memory the caller gives. The engine (package backends/redis)
// decides which commands to send and in what rounds; this package moves
// the bytes, through the go-redis hooks it was given (see Pool.Do).
//
// Memory a Pool keeps: each idle connection holds a 64 KiB read buffer
// and its last request buffer, which is let go rather than kept when it
// grew past MaxRequestBuffer; at most Config.Size connections are open.
package resp
