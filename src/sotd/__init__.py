"""sotd: sot-comm messaging between agent sessions, and the daemon that carries it."""

__version__ = "0.7.0"
# The comm folder contract's version (seed 000: stamped into a new registry.json as ``protocol_version`` and
# checked at a join; it rises with any breaking change to the schema, the line, the cursor or delivery).
# One home: ``formats.registry`` and ``cli.comm.join`` import it. Not the daemon wire's hello protocol
# (``sotd.wire.hello.PROTOCOL``), which numbers the socket protocol and rises on its own.
PROTOCOL_VERSION = 1
