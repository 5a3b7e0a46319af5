package search

// openFlags are none on Windows, where the search does not run (the lean
// envd is a Linux program); os.Root keeps it inside the root.
const openFlags = 0
