package tqtest

// tagCases are the rules of tag values: one set of accepted types on every
// engine, checked before anything is written, read back normalised.
func tagCases() []testCase {
	return nil
}
