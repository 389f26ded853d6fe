"""``sotd comm install`` / ``sotd comm uninstall`` as a list of parts (issue 29).

``command.PARTS`` is the one list: ``scripts`` (the wrappers, the rows' settings file, ``bin/.installed``),
``skill`` (Claude Code's sot-comm skill), ``codex_rules``, ``codex_functions`` (Codex's ``config.toml``) and
``settings`` (Claude Code's ``settings.json`` and Codex's ``hooks.json``, one merge). Each part is a module
with ``check``, ``install`` and ``uninstall`` over the install record (``part.Part``, ``record``);
uninstall is the list walked backwards. Adding a part (an MCP server's registration, say) is one module
here and one entry in ``command.PARTS``. This file stays empty of code.
"""
