package resp

// Stats returns how many connections are open now, and how many of them
// are idle.
func (p *Pool) Stats() (open, idle int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open, len(p.idle)
}
