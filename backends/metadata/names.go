package metadata

// The names a queue accepts. A partition's name becomes part of metadata
// keys; a field's, of storage keys "<index>@<field>#<gen>", which add up
// to 42 bytes and must fit the 255-byte key limit of datasystems such as
// openYuanrong's. Both are 1 to their bound bytes of letters, digits and
// "_.-:/" (no "@" or "#", which storage keys use as separators, no
// spaces, no braces, which Redis Cluster reads as hash tags). tq checks
// them before every call, and a tq server before its engine sees them.
const (
	MaxPartitionName = 255
	MaxFieldName     = 200
)

// ValidName reports whether s is 1 to maxLen bytes of [A-Za-z0-9_.:/-].
func ValidName(s string, maxLen int) bool {
	if len(s) == 0 || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '_', c == '.', c == '-', c == ':', c == '/':
		default:
			return false
		}
	}
	return true
}
