"""sotd: sot-comm messaging between agent sessions, and the daemon that carries it."""

__version__ = "0.7.0"
PROTOCOL_VERSION = 1
