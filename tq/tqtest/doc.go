// Package tqtest is the client-level conformance suite: what tq promises
// to a caller (tag rules, checks of read cells against their metadata,
// BatchGetByMeta's answers), checked through tq.Client on a given engine.
// Every engine in this module runs it (memory, redis standalone and
// Cluster, yuanrong); an engine of your own can too:
//
//	func TestClient(t *testing.T) {
//		tqtest.Run(t, func(t *testing.T) tqtest.Engine { ... })
//	}
//
// RunModel (and RunModelFakeClock, for an engine whose clock a synctest
// bubble controls) goes further: random histories of two clients, each
// result held to one reference model of the documented contract.
//
// Package backends/backendtest checks the engine-facing contracts
// (Backend, MetaStore); this package checks what a caller sees of them.
package tqtest
