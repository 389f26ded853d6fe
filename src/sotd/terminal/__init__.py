"""sotd.terminal."""
