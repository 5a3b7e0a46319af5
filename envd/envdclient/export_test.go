package envdclient

// SetWalkPageEntries sets WalkDir's page size until the returned function
// restores it.
func SetWalkPageEntries(n int) (restore func()) {
	old := walkPageEntries
	walkPageEntries = n
	return func() { walkPageEntries = old }
}
