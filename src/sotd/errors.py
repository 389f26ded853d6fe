"""The one error hierarchy.

Every error carries a stable snake_case ``code`` (the wire's ``code`` where the daemon answers with it),
an ``exit_status`` for the CLI, the exact sentence the spec prescribes as ``message``, and an optional
``hint``. Only ``sotd.cli.main`` prints errors and exits; everything below raises.
"""

from __future__ import annotations


class SotdError(Exception):
    """Base of every error this project raises on purpose."""

    code = "error"
    exit_status = 1

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        code: str | None = None,
        exit_status: int | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint  # printed after the message
        self.reason = reason  # printed before it: the message says "see the reason above"
        if code is not None:
            self.code = code
        if exit_status is not None:
            self.exit_status = exit_status

    def __str__(self) -> str:
        return self.message


class FormatError(SotdError):
    """Bytes that are not a valid instance of one of our on-disk or wire formats."""

    code = "bad_format"


class UsageError(SotdError):
    """A command line the command does not accept."""

    code = "usage"
    exit_status = 2


class HandleError(SotdError):
    """A handle that is not 1-64 bytes of A-Za-z0-9._- (no '..', no leading '-'), or none derivable."""

    code = "bad_handle"


class HomeError(SotdError):
    """The comm folder cannot be named or made."""

    code = "home_failed"


class RegistryUnreadable(SotdError):
    """The registry exists but no good read of it was had (never the same as absent)."""

    code = "registry_unreadable"


class RegistryWriteFailed(SotdError):
    """A registry write failed at one of its steps; nothing was written."""

    code = "registry_write_failed"


class LockFailed(SotdError):
    """The registry lock was not taken within its bound; the message names the holder and the recovery."""

    code = "lock_failed"


class InboxBusy(SotdError):
    """An inbox lock was held past its bound: nothing was appended (writer) or read (reader)."""

    code = "inbox_busy"
    exit_status = 75


class AppendFailed(SotdError):
    """An append failed and was rolled back (or says why it could not be)."""

    code = "file_failed"


class SelfFileError(SotdError):
    """A self file could not be written, or its slot belongs to another project."""

    code = "self_file"


class IdentityRefused(SotdError):
    """The identity check refused this process: it has no comm identity."""

    code = "identity_refused"


class WireError(SotdError):
    """A peer sent bytes that are not a valid envelope (a remote protocol error)."""

    code = "bad_frame"


class DaemonUnreachable(SotdError):
    """No daemon answered within the bound."""

    code = "no_answer"
