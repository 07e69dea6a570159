package redis

// ScriptName names the metadata script whose SHA1 is sha ("append",
// "read", "fence", "alloc"), or returns "", so that a test's proxy can tell
// which script an EVALSHA runs.
func ScriptName(sha string) string {
	switch sha {
	case appendScript.Hash():
		return "append"
	case readScript.Hash():
		return "read"
	case fenceScript.Hash():
		return "fence"
	case allocScript.Hash():
		return "alloc"
	}
	return ""
}
