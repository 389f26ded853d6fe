"""sotd.cli.comm: the ``sotd comm`` verbs and what they share (no code here: the hot path imports it)."""
