"""The comm folder's on-disk formats, one module each (stdlib only, synchronous, hot-path safe)."""
