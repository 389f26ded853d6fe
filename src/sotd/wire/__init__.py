"""sotd.wire."""
