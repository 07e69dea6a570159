package redisserver

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// ReplicaOf makes s a replica of the server at addr ("host:port"), by
// REPLICAOF. The server starts the link and the first sync in the
// background: WaitReplicated waits for them.
func (s *Server) ReplicaOf(ctx context.Context, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("redisserver: replica of %q: %w", addr, err)
	}
	_, err = s.do(ctx, []string{"REPLICAOF", host, port})
	return err
}

// Promote makes a replica a master again (REPLICAOF NO ONE), as a
// failover does: it keeps the data it has and accepts writes.
func (s *Server) Promote(ctx context.Context) error {
	_, err := s.do(ctx, []string{"REPLICAOF", "NO", "ONE"})
	return err
}

// Replication returns the fields of the server's INFO replication
// section (role, master_link_status, master_repl_offset, ...).
func (s *Server) Replication(ctx context.Context) (map[string]string, error) {
	out, err := s.do(ctx, []string{"INFO", "replication"})
	if err != nil {
		return nil, err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields, nil
}

// WaitReplicated waits until replica's link to its master is up, the
// replica has processed the master's replication stream at least up to
// where it was when WaitReplicated was called (every write the master
// acknowledged before the call is then on the replica), and a WAIT on the
// master counts the replica: the first WAITs after a sync were seen to
// wait for the replica's periodic acknowledgement (once a second) rather
// than ask for one. The probe writes and deletes the key
// "redisserver:wait-replicated".
func WaitReplicated(ctx context.Context, master, replica *Server) error {
	mi, err := master.Replication(ctx)
	if err != nil {
		return err
	}
	want, err := strconv.ParseInt(mi["master_repl_offset"], 10, 64)
	if err != nil {
		return fmt.Errorf("redisserver: master %s: master_repl_offset %q", master.Addr(), mi["master_repl_offset"])
	}
	for {
		ri, err := replica.Replication(ctx)
		if err != nil {
			return err
		}
		if ri["master_link_status"] == "up" && ri["master_sync_in_progress"] == "0" {
			if got, err := strconv.ParseInt(ri["slave_repl_offset"], 10, 64); err == nil && got >= want {
				acked, err := master.do(ctx, nil,
					[]string{"SET", "redisserver:wait-replicated", "1"},
					[]string{"DEL", "redisserver:wait-replicated"},
					[]string{"WAIT", "1", "100"})
				if err != nil {
					return err
				}
				if acked != "0" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redisserver: replica %s did not reach offset %d of %s, acknowledged (replication: %v): %w", replica.Addr(), want, master.Addr(), ri, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// do sends cmd, then more, to s on one connection (authenticated when s
// has a password) and returns the last reply.
func (s *Server) do(ctx context.Context, cmd []string, more ...[]string) (string, error) {
	var cmds [][]string
	if s.opts.Password != "" {
		cmds = append(cmds, []string{"AUTH", s.opts.Password})
	}
	if cmd != nil {
		cmds = append(cmds, cmd)
	}
	cmds = append(cmds, more...)
	out, err := Do(ctx, s.Addr(), cmds...)
	if err != nil {
		return "", fmt.Errorf("redisserver: %s on %s: %w", cmds[len(cmds)-1][0], s.Addr(), err)
	}
	return out[len(out)-1], nil
}
