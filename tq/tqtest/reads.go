package tqtest

// readCases are the rules of reads that check cells against their rows'
// metadata.
func readCases() []testCase {
	return nil
}
