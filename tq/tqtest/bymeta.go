package tqtest

// byMetaCases are the rules of BatchGetByMeta: it answers as BatchGet of
// the meta's keys and fields would now.
func byMetaCases() []testCase {
	return nil
}
