package main

// The engines -url can name besides the embedded memory store.
import (
	_ "github.com/tqgo/tqgo/backends/file" // file:///dir: the embedded engine, durable
	_ "github.com/tqgo/tqgo/backends/redis"
	_ "github.com/tqgo/tqgo/tqserve" // tq://host:port: a tq server (tq serve)
	_ "github.com/tqgo/tqgo/yuanrong"
)
