"""sotd.cli."""
