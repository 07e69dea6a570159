package metadata

import "context"

// SettleClaimer is an optional interface of a MetaStore that settles rows
// and claims more in one request, so that a worker's acknowledgements
// ride on its next claim (a tq server's clients: one call per claim).
type SettleClaimer interface {
	// SettleClaim applies s, then claims as Claim does, in one request:
	// as Settle then Claim would, with no change of another caller's
	// between them. Both are checked first (a malformed one fails with
	// ErrInvalid, applying nothing). Its error is Claim's: one matching
	// backends.ErrOutcomeUnknown may have applied both; any other applied
	// neither, except an error of the settle alone (Claimed then holds
	// the claim's lease, which the caller owns).
	SettleClaim(ctx context.Context, partition string, s SettleRequest, req ClaimRequest, pick Pick) (SettleResult, Claimed, error)
}

// SettleClaim settles then claims through q: in one request when q is a
// SettleClaimer, else as q.Settle then q.Claim (a settle that fails
// claims nothing).
func SettleClaim(ctx context.Context, q MetaStore, partition string, s SettleRequest, req ClaimRequest, pick Pick) (SettleResult, Claimed, error) {
	if sc, ok := q.(SettleClaimer); ok {
		return sc.SettleClaim(ctx, partition, s, req, pick)
	}
	if err := s.Check(); err != nil {
		return SettleResult{}, Claimed{}, err
	}
	if err := req.Check(); err != nil {
		return SettleResult{}, Claimed{}, err
	}
	res, err := q.Settle(ctx, partition, s)
	if err != nil {
		return res, Claimed{}, err
	}
	c, err := q.Claim(ctx, partition, req, pick)
	return res, c, err
}
