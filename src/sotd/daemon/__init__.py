"""sotd.daemon."""
