"""sotd.jobs."""
