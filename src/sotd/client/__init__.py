"""sotd.client."""
