"""The HTTP API tier (a package, so its package-scoped Ray and server end with its last test)."""
