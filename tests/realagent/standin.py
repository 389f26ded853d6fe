"""The real-agent tier's stand-in model: the scripted Messages API the demo uses too, which lives in
``src/sotd/demo/scripted_model.py`` (one place for both); this shim keeps the name the tests import."""

from __future__ import annotations

from sotd.demo.scripted_model import (
    MODEL,
    Request,
    ScriptStep,
    StandIn,
    bash,
    newest_user_text,
    sleep,
    text,
    tool,
)

__all__ = ["MODEL", "Request", "ScriptStep", "StandIn", "bash", "newest_user_text", "sleep", "text", "tool"]
