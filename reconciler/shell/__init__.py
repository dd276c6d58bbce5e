"""The I/O shell around the pure core: files, HTTP, DNS, TLS, git, the journal."""
