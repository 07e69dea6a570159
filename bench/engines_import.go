package main

// The engines the kv suite can open by URL: each registers its scheme when
// imported, as database/sql drivers do.
import (
	_ "github.com/tqgo/tqgo/backends/file"   // "file://": the durable embedded engine
	_ "github.com/tqgo/tqgo/backends/memory" // "memory://" (tq imports it too)
	_ "github.com/tqgo/tqgo/backends/redis"  // "redis://"
	_ "github.com/tqgo/tqgo/yuanrong"        // "yuanrong://": the port over its in-process datasystem
)
