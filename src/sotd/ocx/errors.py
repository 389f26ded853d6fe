"""The errors OCX raises: each a ``SotdError`` with a stable code and one clear sentence."""

from __future__ import annotations

from sotd.errors import EXIT_NOT_DELIVERED, SotdError


class OcxError(SotdError):
    """Something OCX was asked to do could not be done; the message says what and why."""

    code = "ocx"


class OcxConfigError(OcxError):
    """The node's configuration file is missing, unreadable or inconsistent."""

    code = "ocx_config"


class NotFossil(OcxError):
    """A file named as a repository is not a Fossil repository."""

    code = "ocx_not_fossil"


class DuplicateServerCode(OcxError):
    """Two clones the node serves share one server-code (decision O12)."""

    code = "ocx_duplicate_server_code"


class InvalidMessage(OcxError):
    """Bytes offered for posting are not a valid OCX v2 envelope."""

    code = "ocx_invalid"


class NotDelivered(OcxError):
    """A posted message is not on the remote after the push (e.g. a login without capability y)."""

    code = "ocx_not_delivered"
    exit_status = EXIT_NOT_DELIVERED


class FossilFailed(OcxError):
    """The fossil program failed; the message carries what it said."""

    code = "ocx_fossil_failed"
