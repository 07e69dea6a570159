package redisserver

import (
	"context"
	"testing"
	"time"
)

// TestReplica: a replica has what the master wrote once WaitReplicated
// returns, refuses writes, and takes them once promoted, keeping its data.
func TestReplica(t *testing.T) {
	skipWithout(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	master, err := Start(ctx, Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Stop()
	replica, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Stop()
	if err := replica.ReplicaOf(ctx, master.Addr()); err != nil {
		t.Fatal(err)
	}
	if _, err := Do(ctx, master.Addr(), []string{"SET", "k", "v"}); err != nil {
		t.Fatal(err)
	}
	if err := WaitReplicated(ctx, master, replica); err != nil {
		t.Fatal(err)
	}
	info, err := replica.Replication(ctx)
	if err != nil || info["role"] != "slave" {
		t.Fatalf("replica's role %q (%v), want slave", info["role"], err)
	}
	if got, err := Do(ctx, replica.Addr(), []string{"GET", "k"}); err != nil || got[0] != "v" {
		t.Fatalf("GET k on the replica: %q, %v; want v", got, err)
	}
	if _, err := Do(ctx, replica.Addr(), []string{"SET", "k", "w"}); err == nil {
		t.Fatal("the replica accepted a write")
	}
	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := Do(ctx, replica.Addr(), []string{"SET", "j", "w"}, []string{"GET", "k"})
	if err != nil || got[1] != "v" {
		t.Fatalf("after Promote: %q, %v; want the write taken and k kept", got, err)
	}
	if err := replica.ReplicaOf(ctx, "no-port"); err == nil {
		t.Fatal("ReplicaOf an address without a port: no error")
	}
}
