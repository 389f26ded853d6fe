"""OCX v2, layers 1 and 2: whole messages carried between nodes through Fossil repositories.

- ``envelope``: pure. Bytes in, the envelope (``ocx``, ``to`` / ``re``, the kind) or an invalid verdict out;
  Fossil's hash of the bytes; the check that a file's name is its hash. Never reads the content.
- ``config``: the node's configuration file (TOML), parsed and checked (decision O12).
- ``fossil``: the thin shell around the ``fossil`` program and the repository file (layer 1).
- ``index``: the node's SQLite index of every message seen, the first valid bytes of each name, and the
  readers' hand-off record.
- ``writeonce``: pure. When a name's kept bytes must be put back, and the sentence a post prints.
- ``node``: ``NodeClones``, which syncs its clones, fills the index, hands new valid messages to the readers of
  their kind, posts and answers. The daemon runs ``NodeClones.poll_loop`` in a thread.

See docs/ocx.md and ../shared/spec/ocx.md (decisions O1-O4, O12). This package imports only
``sotd.errors``, ``sotd._clock``, ``sotd.text`` and the standard library; only the CLI, the daemon and
``sotd.ocxrun`` import it.
"""
