"""The node policy file of OCX layer 3 (``ocx-policy.toml``): where runs live, what they may do, whom they
are taken from.

``load_settings`` reads ``$SOT_OCX_POLICY``, else ``ocx-policy.toml`` beside the node's ``ocx.toml``; no
file gives settings under which the node runs nothing (every run addressed to it ends ``refused``).
``[runs.senders]`` names, per clone, the logins whose runs the node takes (``sender_refusal``). What would
break it: an unknown table or key read as if it were absent (a misspelled limit would silently not
apply), or a path kept unresolved (the executor walks these without following links).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field

from sotd.jobs import nodepolicy
from sotd.jobs.errors import PolicyError
from sotd.ocx import envelope
from sotd.ocx.errors import OcxConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from sotd.ocx.config import NodeConfig

POLICY_NAME = "ocx-policy.toml"


@dataclass(frozen=True)
class RunSettings:
    """The node policy file: where runs live, what they may do, and how a ``clone`` step reaches a clone.

    ``path`` is ``None`` when there is no policy file: then the node runs nothing."""

    path: str | None
    policy: nodepolicy.Policy
    root: str
    state: str
    release: str | None = None
    clone_urls: Mapping[str, str] = field(default_factory=dict)
    senders: Mapping[str, frozenset[str]] = field(default_factory=dict)


def policy_path(config: NodeConfig, environ: Mapping[str, str]) -> str:
    """``$SOT_OCX_POLICY``, else ``ocx-policy.toml`` beside the node's configuration file."""
    if environ.get("SOT_OCX_POLICY"):
        return os.path.abspath(environ["SOT_OCX_POLICY"])
    return os.path.join(os.path.dirname(config.path), POLICY_NAME)


def parse_settings(doc: Mapping[str, object], path: str) -> RunSettings:
    """The policy file's tables (already read with ``tomllib``): ``[runs]`` and ``[jobs.policy]``."""
    base = os.path.dirname(os.path.abspath(path))
    extra = sorted(set(doc) - {"runs", "jobs"})
    if extra:
        raise OcxConfigError(f"ocx: {path}: unknown table {extra[0]!r} (known: [runs], [jobs.policy])")
    runs = doc.get("runs", {})
    if not isinstance(runs, dict):
        raise OcxConfigError(f"ocx: {path}: [runs] must be a table")
    bad = sorted(set(runs) - {"root", "state", "release", "clone_urls", "senders"})
    if bad:
        raise OcxConfigError(f"ocx: {path}: [runs] has an unknown key {bad[0]!r}")

    def where(key: str, default: str | None) -> str | None:
        v = runs.get(key, default)
        if v is None:
            return None
        if not isinstance(v, str) or not v:
            raise OcxConfigError(f"ocx: {path}: runs.{key} must be a non-empty path")
        # the real path: the executor walks these without following links, so a link the operator put
        # on the way (/var/run -> /run) is resolved once, here, from the trusted configuration
        return os.path.realpath(os.path.join(base, v))

    urls = runs.get("clone_urls", {})
    if not isinstance(urls, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v.startswith(("http://", "https://"))
        for k, v in urls.items()
    ):
        raise OcxConfigError(f"ocx: {path}: runs.clone_urls must map clone names to http(s) URLs")
    senders = parse_senders(runs.get("senders", {}), path)
    jobs = doc.get("jobs", {})
    table = jobs.get("policy", {}) if isinstance(jobs, dict) else None
    if not isinstance(table, dict):
        raise OcxConfigError(f"ocx: {path}: [jobs.policy] must be a table")
    try:
        policy = nodepolicy.parse_policy(table)
    except PolicyError as e:
        raise OcxConfigError(f"ocx: {path}: {e.message}") from None
    root = where("root", "ocx-root")
    state = where("state", "ocx-state")
    assert root is not None and state is not None
    return RunSettings(
        path=os.path.abspath(path),
        policy=policy,
        root=root,
        state=state,
        release=where("release", None),
        clone_urls={str(k): str(v) for k, v in urls.items()},
        senders=senders,
    )


def parse_senders(v: object, path: str) -> dict[str, frozenset[str]]:
    """``[runs.senders]``: clone name -> the logins whose runs the node takes on that clone."""
    if not isinstance(v, dict) or not all(
        isinstance(k, str) and isinstance(x, list) and all(envelope.is_login(y) for y in x)
        for k, x in v.items()
    ):
        raise OcxConfigError(f"ocx: {path}: runs.senders must map clone names to lists of logins")
    return {str(k): frozenset(str(y) for y in x) for k, x in v.items()}


def sender_refusal(senders: Mapping[str, frozenset[str]], clone: str, sender: str) -> str | None:
    """Why the node policy takes no run from ``sender`` on ``clone`` (``None``: it does). No list for the
    clone takes runs from no one."""
    allowed = senders.get(clone)
    if not allowed:
        return f"this node takes runs on the clone {clone!r} from no login (its policy lists none in runs.senders)"
    if sender not in allowed:
        return f"this node does not take runs on the clone {clone!r} from the login {sender!r}"
    return None


def load_settings(config: NodeConfig, environ: Mapping[str, str]) -> RunSettings:
    """Read the policy file named by ``policy_path``. No file: settings under which the node runs nothing
    (its state still beside the configuration, so a restart can end what an earlier policy started)."""
    path = policy_path(config, environ)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        base = os.path.dirname(config.path)
        return RunSettings(
            None, nodepolicy.Policy(), os.path.join(base, "ocx-root"), os.path.join(base, "ocx-state")
        )
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise OcxConfigError(f"ocx: cannot read the node policy {path}: {e}") from None
    return parse_settings(doc, path)
