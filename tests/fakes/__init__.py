"""Fakes shared by tests: small stand-ins for the daemon and other peers."""
