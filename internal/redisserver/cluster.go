package redisserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Cluster is a private Redis Cluster of masters without replicas. Its
// methods are safe for concurrent use.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts n masters (n >= 3, the least redis-cli accepts; 0
// means 3) with cluster-enabled yes, joins them with `redis-cli --cluster
// create ... --cluster-replicas 0 --cluster-yes`, and returns once every
// node reports cluster_state:ok with all 16384 slots assigned. Stop it with
// Stop.
func StartCluster(ctx context.Context, n int) (*Cluster, error) {
	return StartClusterWith(ctx, n, Options{})
}

// StartClusterWith is StartCluster with opts for every node: their Args
// come after the cluster's own (and so win), and stay the node's on
// Restart (e.g. --appendonly yes, so that a node restarted on its files
// keeps its data). A Password is not supported.
func StartClusterWith(ctx context.Context, n int, opts Options) (*Cluster, error) {
	if opts.Password != "" {
		return nil, errors.New("redisserver: a cluster with a password is not supported")
	}
	if n == 0 {
		n = 3
	}
	if n < 3 {
		return nil, fmt.Errorf("redisserver: a cluster needs at least 3 masters, not %d", n)
	}
	bin, err := findBinary("redis-server")
	if err != nil {
		return nil, err
	}
	cli, err := findBinary("redis-cli")
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	for range n {
		s, err := startNode(ctx, bin, opts)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.nodes = append(c.nodes, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("redisserver: redis-cli --cluster create: %w: %s", err, lastLines(string(out), 5))
	}
	if err := c.waitOK(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// startNode starts one cluster-enabled server whose port and bus port
// (port + 10000) are both free.
func startNode(ctx context.Context, bin string, opts Options) (*Server, error) {
	dir, err := os.MkdirTemp("", "tq-redis-cluster-")
	if err != nil {
		return nil, fmt.Errorf("redisserver: %w", err)
	}
	s := &Server{bin: bin, dir: dir, opts: Options{StartTimeout: opts.StartTimeout}}
	extra := append([]string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "5000",
	}, opts.Args...)
	for attempt := 0; ; attempt++ {
		if s.port, err = freePort(true); err == nil {
			if err = s.start(ctx, extra...); err == nil {
				s.opts.Args = extra // so Restart starts a cluster node again
				return s, nil
			}
		}
		if attempt == 4 || ctx.Err() != nil || !errors.Is(err, errAddrInUse) {
			os.RemoveAll(dir)
			return nil, err
		}
	}
}

// WaitOK returns once every node says the cluster is ok (see waitOK),
// as after a node's Restart, or an error after 30 seconds.
func (c *Cluster) WaitOK(ctx context.Context) error { return c.waitOK(ctx) }

// waitOK polls CLUSTER INFO on every node until each says the cluster is
// ok: nodes learn the slot layout by gossip, a moment after create returns.
func (c *Cluster) waitOK(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		ok := true
		var last string
		for _, s := range c.nodes {
			r, err := Do(ctx, s.Addr(), []string{"CLUSTER", "INFO"})
			if err != nil || !strings.Contains(r[0], "cluster_state:ok") || !strings.Contains(r[0], "cluster_slots_ok:16384") {
				ok = false
				if err != nil {
					last = err.Error()
				} else {
					last = s.Addr() + ": " + strings.ReplaceAll(lastLines(r[0], 20), "\r", "")
				}
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redisserver: cluster not ok: %w (%s)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Nodes are the masters' servers, in the order of Addrs: a test may Kill
// and Restart one.
func (c *Cluster) Nodes() []*Server { return slices.Clone(c.nodes) }

// Addrs are the masters' "127.0.0.1:port" addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		out[i] = s.Addr()
	}
	return out
}

// URL is the redis+cluster:// URL naming every master, as the tqgo redis
// engine parses it: "redis+cluster://h1:p1,h2:p2,h3:p3/".
func (c *Cluster) URL() string {
	return "redis+cluster://" + strings.Join(c.Addrs(), ",") + "/"
}

// Stop stops every node and removes their directories.
func (c *Cluster) Stop() error {
	var errs []error
	for _, s := range c.nodes {
		errs = append(errs, s.Stop())
	}
	return errors.Join(errs...)
}
