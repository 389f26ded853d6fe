"""``sotd/errors.py``: the one error hierarchy, and the generator of docs/errors.md.

Spec: behaviour.md's exact sentences (every refusal and failure a command prints) and issue 16 ("errors
carry their code, exit status, exact sentence and hint; only ``cli/main.py`` prints them").
Guarantee: every error carries a stable snake_case ``code`` (the wire's ``code`` where the daemon answers
with it), an ``exit_status`` for the CLI, the exact sentence as ``message``, and an optional ``hint`` (the
next step, a command the user can type). Each class names its code once; one code has one exit status.
Only ``sotd.cli.main`` prints errors and exits; everything below raises. ``python -m sotd.errors`` prints
docs/errors.md from the classes below (a test keeps the checked-in page equal to it).
What would break it: a verb that prints its own error or returns a literal status; two classes with one
code; a code or status given by hand (``SotdError(..., code=...)``: ``except`` on the class would not
match it, and the docs would not list it). Every code has its class here and is raised by it; a walk
(tests/unit/test_errors_raised_by_class.py) fails on a ``code=`` given outside an errors module (but the
wire's ``RemoteProtocolError``, whose code is the wire's answer code) and on a class nothing raises.

A leaf: standard library only, imported by the hot path (no typing or dataclasses at run time).
"""

from __future__ import annotations

# The exit statuses a ``sotd`` command ends with (docs/errors.md lists them).
EXIT_OK = 0
EXIT_FAILED = 1  # the command did not do what was asked; stderr says why
EXIT_USAGE = 2  # a command line the command table does not accept (or a bare group)
EXIT_SLOT_REFUSED = 3  # join refused a self-file slot that names another project's session
EXIT_NOT_DELIVERED = 3  # ``sotd ocx post``: the message is not on the remote (docs/ocx.md); another command
EXIT_BUSY = 75  # EX_TEMPFAIL: a lock was held past its bound; nothing was done, try again
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_CLOSED_STDOUT = 141  # 128 + SIGPIPE: the reader of stdout went away

EXIT_MEANINGS = (
    (EXIT_OK, "done"),
    (EXIT_FAILED, "not done; stderr says why (and the next step)"),
    (EXIT_USAGE, "a command line the command table does not accept; the usage follows"),
    (
        EXIT_SLOT_REFUSED,
        "join refused a self-file slot that names another project's session; "
        "`sotd ocx post`: the message did not reach the remote",
    ),
    (EXIT_BUSY, "a lock was held past its bound; nothing was done, run it again"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
    (EXIT_CLOSED_STDOUT, "the reader of stdout went away (`sotd comm list | head`)"),
)


class SotdError(Exception):
    """Base of every error this project raises on purpose."""

    code = "error"
    exit_status = EXIT_FAILED
    sentence = "<what failed>"  # the form of ``message`` (docs/errors.md)
    next_step = ""  # what the hint says, when there is one (docs/errors.md)
    stdout = False  # the sentence goes to stdout (poll's busy inbox, behaviour 1.5), else stderr

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        code: str | None = None,
        reason: str | None = None,
        after: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint  # printed after the message
        self.reason = reason  # printed before it: the message says "see the reason above"
        self.after = after  # printed last: what the command did after the failure (a rollback)
        if code is not None:  # the wire's answer code (``RemoteProtocolError``); other classes name theirs
            self.code = code

    def __str__(self) -> str:
        return self.message

    def lines(self) -> list[str]:
        """What ``sotd.cli.main`` prints, in order: reason, message, hint, after."""
        shown = [self.reason] if self.reason else []
        shown.append(self.message)
        if self.hint:
            shown.append(self.hint)
        shown.extend(self.after)
        return shown


class FormatError(SotdError):
    """Bytes that are not a valid instance of one of our on-disk or wire formats."""

    code = "bad_format"
    sentence = "<file or frame>: <what is wrong with its bytes>"


class UsageError(SotdError):
    """A command line the command does not accept."""

    code = "usage"
    exit_status = EXIT_USAGE
    sentence = "<command>: <the problem> (see --help)"


class ScriptUsage(SotdError):
    """A comm-*.sh verb's own usage line: exit 1, as the 0.6.6 scripts end (behaviour 1.3, 1.10, 1.11)."""

    code = "script_usage"
    sentence = "usage: <command> <synopsis>  |  no target; use @name or --broadcast"


class BadArgument(SotdError):
    """An argument of the right shape whose value the verb refuses (spawn's --agent, --label, path...)."""

    code = "bad_argument"
    sentence = "ERROR: <option> must be <what> (got '<value>')"
    next_step = "the verb's options (`<command> --help`)"


class HandleError(SotdError):
    """A handle that is not 1-64 bytes of A-Za-z0-9._- (no '..', no leading '-'), or none derivable."""

    code = "bad_handle"
    sentence = 'invalid handle: "<handle>"'


class HomeError(SotdError):
    """The comm folder cannot be named or made."""

    code = "home_failed"
    sentence = "comm-lib: <the comm folder problem>"


class LinkRefused(SotdError):
    """A comm-folder file (inbox, lock, cursor, read hint, self file, registry, lock record) or layout folder
    is a symbolic link: nothing is read or written through it (issue 25, behaviour 6.0)."""

    code = "link_refused"
    sentence = (
        "<path> is a symbolic link, and sotd reads and writes nothing in the comm folder through one: "
        "replace it with a real file or folder (or remove it), then run the command again"
    )


class ContextFailed(SotdError):
    """Behaviour 1.1's context (declared host, project root, self slot) could not be established."""

    code = "no_context"
    sentence = "comm-context: <what could not be established>; aborting ..."


class NotJoined(SotdError):
    """The command needs this session's handle and the self file names none."""

    code = "not_joined"
    sentence = "Not joined — run comm-join.sh first."


class RegistryUnreadable(SotdError):
    """The registry exists but no good read of it was had (never the same as absent)."""

    code = "registry_unreadable"
    sentence = "FAILED...: the registry could not be read...; nothing was <done>"
    next_step = "`sotd doctor`"


class RegistryLinked(RegistryUnreadable):
    """``registry.json`` is a symbolic link: it is read as unreadable (nothing is written), and the sentence
    names the link (issue 25)."""

    code = "registry_linked"
    sentence = (
        "<comm>/registry.json is a symbolic link, and sotd reads and writes nothing in the comm folder "
        "through one: replace it with a real file or folder (or remove it), then run the command again"
    )


class RegistryWriteFailed(SotdError):
    """A registry write failed at one of its steps; nothing was written."""

    code = "registry_write_failed"


class LockFailed(SotdError):
    """The registry lock was not taken within its bound; the message names the holder and the recovery."""

    code = "lock_failed"


class LockRecordFailed(SotdError):
    """The inbox lock record (NFS, behaviour 2.5) could not be written or kept changing."""

    code = "lock_record_failed"
    sentence = (
        "the inbox lock record <path> <could not be written: <why>|kept changing while this hub wrote it>"
    )


class InboxBusy(SotdError):
    """An inbox lock was held past its bound: nothing was appended (writer) or read (reader)."""

    code = "inbox_busy"
    exit_status = EXIT_BUSY
    sentence = "the inbox for @<handle> is being written — nothing was <read|counted>; <run it again>"


class PollBusy(InboxBusy):
    """Poll's busy inbox: its sentence goes to stdout, where poll's readers look (behaviour 1.5)."""

    code = "poll_busy"
    stdout = True
    sentence = "the inbox for @<handle> is being written — nothing was read; run comm-poll.sh again"


class InboxUnreadable(SotdError):
    """An inbox file that exists could not be read."""

    code = "inbox_unreadable"
    sentence = "the inbox for @<handle> could not be read: <why>"


class CursorFailed(SotdError):
    """A read cursor could not be read or written."""

    code = "cursor_failed"
    sentence = "the read cursor <path> could not be <read|written>: <why>"


class AppendFailed(SotdError):
    """An append failed and was rolled back (or says why it could not be)."""

    code = "file_failed"


class SelfFileError(SotdError):
    """A self file could not be written (its slot claimed for another project: ``SlotClaimed``)."""

    code = "self_file"
    sentence = "could not write the self file '<path>': <why>"


class SlotClaimed(SelfFileError):
    """A join's guarded write found, just before its rename, that the slot was claimed for another project
    meanwhile (``selffile.write_guarded``); the temp is removed and the slot kept (behaviour 1.2, 6.7)."""

    code = "slot_claimed"
    exit_status = EXIT_SLOT_REFUSED
    sentence = "the identity slot '<path>' already names @<h>, claimed for root='<root>' ... REFUSING ..."
    next_step = "re-run with --repin if it really is this project's now"


class SlotRefused(SotdError):
    """Join refused a self-file slot that names another project's session (behaviour 1.2); nothing written
    to the slot."""

    code = "slot_refused"
    exit_status = EXIT_SLOT_REFUSED
    sentence = "<command>: REFUSING to put a '<repo>' identity in ... slot ..."
    next_step = "run it from the session that owns the slot, or re-run with --repin"


class JoinFailed(SotdError):
    """Join wrote the registry but not the self file; the sentence names the fix."""

    code = "join_failed"
    sentence = (
        "<command>: FATAL — joined as @<h> in the registry, but could not write the local self-file ..."
    )


class StampDiscarded(SotdError):
    """A work-state declaration with no registry row to stamp (behaviour 1.9); nothing was written."""

    code = "stamp_discarded"
    sentence = "<command>: no registry row for '<h>' from cwd <cwd> -- stamp discarded; run it from ..."


class StateRefused(SotdError):
    """A work-state declaration the row's state does not allow (behaviour 1.9, ``workstate.validate``)."""

    code = "state_refused"
    exit_status = EXIT_USAGE
    sentence = "<command>: <why the declaration does not apply>"


class BridgeFailed(SotdError):
    """The stdio bridge would not join its daemon: the socket is not there, not private, or refused."""

    code = "bridge_failed"
    sentence = "sotd stdio-bridge (for <host>): <why>"


class NoRelayEndpoint(SotdError):
    """``sotd topology relay-endpoint`` found none: no hosts.toml, an unreadable one, or no hub socket."""

    code = "no_relay_endpoint"
    sentence = "<why there is no relay endpoint>"


class TopologyUnreadable(SotdError):
    """``hosts.toml`` is there but cannot be read or is no valid topology (nested too deep, a control
    character, a bad ``ssh:`` target, a bad type): the box names no hub; a running daemon keeps serving its
    folder with its last good topology and says so in ``sotd daemon status`` and ``sotd doctor``."""

    code = "topology_unreadable"
    sentence = "this box's hosts.toml cannot be read, so it names no hub: <why>"
    next_step = "fix the file (`sotd topology path` names it), then `sotd daemon reload`"

    def __init__(self, why: str) -> None:
        super().__init__(f"this box's hosts.toml cannot be read, so it names no hub: {why}")
        self.why = why


class IdentityRefused(SotdError):
    """The identity check refused this process: it has no comm identity."""

    code = "identity_refused"
    sentence = "<command>: <why this process may not act as a handle>"


class SendFailed(SotdError):
    """One send's single result when it did not file (behaviour 1.3): nothing is queued or retried."""

    code = "send_failed"
    sentence = "FAILED -> @<handle>: <reason>  |  Broadcast to <k> of <n> agent(s)."
    next_step = "the failure's own next step (cli/comm/hints.py), when it has one"


class SpawnFailed(SotdError):
    """A spawn that did not get a ready row (behaviour 1.10): its sender unverifiable, a name taken, the
    daemon silent or refusing; a provisional registry row it wrote is rolled back, reported after it."""

    code = "spawn_failed"
    sentence = "ERROR: <what the daemon did or said>; nothing was spawned"
    next_step = "`sotd doctor`, or the despawn command that removes a row left running"


class TaskNotQueued(SotdError):
    """The row was spawned but its ``--task`` mail was not filed."""

    code = "task_not_queued"
    sentence = "ERROR: the task could not be queued for @<h>: <reason>"
    next_step = "the comm-send.sh command that sends it by hand"


class DespawnFailed(SotdError):
    """A despawn that did not destroy the row or remove its entry (behaviour 1.11)."""

    code = "despawn_failed"
    sentence = "FAILED: ... nothing was despawned  |  ERROR: workspace.destroy failed: <answer>"
    next_step = "`sotd doctor`, or comm-leave.sh --name <h> for a bare registry entry"


class SettingsRefused(SotdError):
    """An agent's settings file (Claude Code's settings JSON or ``~/.claude.json``, Codex's ``config.toml``)
    that ``sotd comm install`` cannot edit safely: not valid, or a part of the wrong type; nothing was
    changed."""

    code = "settings_refused"
    sentence = "<file>: <what is wrong with it>; nothing was changed"
    next_step = "fix it (the hint says how), then: sotd comm install --agent-settings"


class NoSotdExecutable(SotdError):
    """``sotd comm install`` found no ``sotd`` beside its interpreter and no ``$SOTD_BIN``."""

    code = "no_sotd_executable"
    sentence = "sotd comm install: cannot find this installation's sotd beside <python>"


class FixNotApplicable(SotdError):
    """A ``sotd doctor --fix`` step that does not apply on this box (the torn tail of an inbox whose lock
    this box does not take); the finding stays."""

    code = "fix_not_applicable"
    sentence = "this box does not take the inbox lock itself, so it cannot cut the tail"
    next_step = "the next message filed to it cuts it: sotd comm send @<h> ..."


class SocketFolderRefused(SotdError):
    """A level of the daemon's socket folder is another account's, a link, or writable by others (issue 25:
    ``/tmp/sotd-<uid>/`` made first by another user); nothing was written in it."""

    code = "socket_folder_refused"
    sentence = (
        "refusing the daemon's socket folder <level>: <why>, so another account could plant or swap files in "
        "it and nothing was written there; set SOT_SOCKET=<comm>/state/run-<host>-<label>/sotd.sock for every "
        "sotd command on this box (sotd makes that folder private)"
    )


class DaemonOfAnotherFolder(SotdError):
    """The daemon answering at this command's socket serves another comm folder (a ``$SOT_SOCKET`` shared
    by two folders): it is not this folder's daemon, so nothing is started or asked of it (issue 27)."""

    code = "daemon_of_another_folder"
    sentence = "sotd daemon: the daemon at <socket> (pid <pid>) serves the comm folder <theirs>, not <ours>"
    next_step = "unset SOT_SOCKET (the default socket follows the comm folder), or give this folder its own"


class DaemonNotFound(SotdError):
    """No daemon endpoint could be named or started for a command that needs one."""

    code = "no_daemon"
    sentence = "ERROR: could not find the sotd daemon. Set --endpoint unix:/path or ssh:target[/host]."
    next_step = "sotd daemon start"


class EndpointRefused(SotdError):
    """An endpoint the user named does not parse; no local daemon is put in its place."""

    code = "endpoint_refused"
    sentence = "comm-lib: refusing to substitute a local daemon for the endpoint you named: <value>"


class EndpointDiscarded(SotdError):
    """A verb or ``sotd doctor`` was handed an endpoint this version cannot dial (``pipe:``, ``tcp:``, a
    malformed ``unix:`` or ``ssh:``): nothing is sent."""

    code = "endpoint_discarded"
    sentence = "comm-lib: discarding an endpoint this version cannot dial: <value>"


class NoHello(SotdError):
    """No hello can be said: this box's declared host or this process's OS account could not be read."""

    code = "no_hello"
    sentence = "cannot say hello: this <box's declared host|process's OS account> could not be read"


class DaemonWithoutHost(SotdError):
    """``sotd daemon run`` cannot serve: this box's declared host could not be read (behaviour 1.1)."""

    code = "daemon_without_host"
    sentence = "sotd daemon: this box's declared host could not be read (set SOT_SELF_HOST)"


class AlreadyServed(SotdError):
    """A second daemon for one comm folder and host (the folder's daemon lock is held), or for a socket
    another daemon answers on; the second one exits and the first keeps serving."""

    code = "already_running"
    sentence = "another sotd daemon already serves the comm folder <home> as host <host> (<pid, socket>)"
    next_step = "stop it first: sotd daemon stop --socket <socket>  (or find it: fuser -v <lock>)"


class SocketPathTaken(SotdError):
    """The daemon's socket path holds something that is not a socket; it is left as it is."""

    code = "socket_path_taken"
    sentence = "refusing to serve <path>: something that is not a socket is there"


class AnswerWithoutPart(SotdError):
    """A daemon answered an op without the part the op's answer carries (``version.query``'s ``daemon``
    object, ``workspace.list``'s ``workspaces``): the answer is not used."""

    code = "answer_without_part"
    sentence = (
        "the daemon at unix:<socket> answered <op> without a daemon object: <answer>  |  "
        "workspace.list answered <answer>"
    )


class SessionRowFailed(SotdError):
    """The daemon could not open an OCX session's row (its ``workspace.create`` or the handle's declaration
    was refused, or the registry or inbox write failed); a row it made is closed again."""

    code = "session_row_failed"
    sentence = "<the daemon's refusal, or what could not be written>"


class DaemonStartFailed(SotdError):
    """``sotd daemon start``'s daemon exited at start, or did not answer within the start bound; the
    last lines of its log follow the sentence."""

    code = "daemon_start_failed"
    sentence = "sotd daemon: <it exited at start (status <n>)|no answer at <socket> within <s>s>; see <log>"


class DaemonStopFailed(SotdError):
    """``sotd daemon stop`` found no daemon to stop (no status file, or one naming a process that is gone:
    it is removed, nothing is signalled), or its daemon outlived the bound after SIGTERM."""

    code = "daemon_stop_failed"
    sentence = (
        "sotd daemon: <no daemon runs at <socket>|the status file names pid <n> ...|pid <n> did not stop ...>"
    )


class NoDaemonAnswered(SotdError):
    """``sotd daemon status`` or ``reload`` had no answer from a daemon at the socket."""

    code = "no_daemon_answered"
    sentence = "sotd daemon: no daemon answered at <socket>: <why>"
    next_step = "start it: sotd daemon start (status)"


class WebListenFailed(SotdError):
    """``sotd web`` could not listen on 127.0.0.1 at the port asked for (taken, or not allowed)."""

    code = "web_listen_failed"
    sentence = "sotd web: cannot listen on 127.0.0.1:<port>: <why>"
    next_step = "choose another port (--port N), or none and the system picks one"


class ReloadRefused(SotdError):
    """The daemon answered ``daemon.reload`` with a refusal (``hosts.toml`` cannot be read: the sentence
    names the fix): it keeps the topology it had."""

    code = "reload_refused"
    sentence = "sotd daemon: reload refused: <the daemon's sentence>; <what it keeps>"


class DaemonUnitFailed(SotdError):
    """``sotd daemon install|uninstall`` could not write or remove the systemd user unit, or systemctl
    would not enable it."""

    code = "daemon_unit_failed"
    sentence = (
        "sotd daemon <install|uninstall>: <cannot write|cannot remove> <unit>: <why>  |  ... failed: <said>"
    )
    next_step = "see: systemctl --user status sotd.service (enable)"


class WireError(SotdError):
    """A peer sent bytes that are not a valid envelope (a remote protocol error)."""

    code = "bad_frame"


class DaemonUnreachable(SotdError):
    """No daemon answered within the bound."""

    code = "no_answer"
    sentence = "the daemon did not answer at <endpoint> ..."


class HelloRefused(DaemonUnreachable):
    """The daemon answered the hello with a refusal (a version or identity it does not accept)."""

    code = "hello_refused"
    sentence = "hello refused: <refusal>"


# ------------------------------------------------------------------------------------ docs/errors.md


def error_classes() -> list[type[SotdError]]:
    """Every error class of this module, base first, in the order they are written here."""
    return [SotdError, *_below(SotdError)]


def _below(cls: type[SotdError]) -> list[type[SotdError]]:
    found: list[type[SotdError]] = []
    for sub in cls.__subclasses__():
        if sub.__module__ == __name__:
            found.append(sub)
            found.extend(_below(sub))
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_doc() -> str:
    """docs/errors.md: the exit statuses, then one row per error class."""
    lines = [
        "# Errors",
        "",
        "Generated by `python -m sotd.errors > docs/errors.md` from the classes in `src/sotd/errors.py`;",
        "a test fails when this page and the classes disagree. Every error a command prints is one of these:",
        "`sotd.cli.main` prints its reason (when it has one), its sentence, its hint (the next step), and what",
        "the command did after it, on stderr (stdout where the class says so), then exits with its status.",
        "",
        "## Exit statuses",
        "",
        "| status | meaning |",
        "|---|---|",
    ]
    lines += [f"| {status} | {_cell(meaning)} |" for status, meaning in EXIT_MEANINGS]
    lines += [
        "",
        "## Error classes",
        "",
        "| code | exit | class | when | sentence | hint |",
        "|---|---|---|---|---|---|",
    ]
    for cls in error_classes():
        when = " ".join((cls.__doc__ or "").split())
        where = " (stdout)" if cls.stdout else ""
        lines.append(
            f"| `{cls.code}` | {cls.exit_status} | `{cls.__name__}` | {_cell(when)} | "
            f"`{_cell(cls.sentence)}`{where} | {_cell(cls.next_step)} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(render_doc())
