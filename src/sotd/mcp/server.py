"""``sotd/mcp/server.py``: ``sotd mcp``, the stdio loop: read lines, answer them, run tool calls.

Spec: the MCP stdio transport (one JSON-RPC message per line on stdin and stdout; stderr is a log); issue
26 item 1. Guarantee: stdout carries nothing but answers: the protocol's stdout is a private copy of fd
1, and fd 0 and fd 1 are pointed at /dev/null before any tool runs, so a child process a verb starts (a
daemon) can neither read the client's requests nor write into the answers; a verb's own lines are caught
(``tools.call``). A bad line is answered and logged, never ends the server; the server ends when stdin
closes (the agent went away) or a write finds the reader gone.
What would break it: a write to fd 1 or ``sys.stdout`` outside ``_send`` once the loop runs, or a tool
call that blocks for ever (each verb bounds its waits: locks, the daemon's 5 s).
"""

from __future__ import annotations

import os

from sotd.errors import EXIT_OK
from sotd.mcp import protocol, tools


def _private_stdio() -> tuple[int, int]:
    """(requests fd, answers fd): copies of fd 0 and 1 that no child inherits; fd 0 and 1 become
    /dev/null for everything else."""
    rfd, wfd = os.dup(0), os.dup(1)  # os.dup's copies are not inheritable
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return rfd, wfd


def _send(wfd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(wfd, view)
        view = view[n:]


def _log(line: str) -> None:
    try:
        os.write(2, f"sotd mcp: {line}\n".encode("utf-8", "replace"))
    except OSError:
        pass


def run(argv: list[str]) -> int:
    if argv:
        from sotd.errors import UsageError

        raise UsageError(f"sotd mcp: unexpected argument '{argv[0]}' (see --help)")
    os.umask(0o077)
    rfd, wfd = _private_stdio()
    conn = protocol.McpConnection(tools.listing)
    splitter = protocol.LineSplitter()
    try:
        while True:
            try:
                data = os.read(rfd, 1 << 16)
            except InterruptedError:
                continue
            if not data:
                break
            for line in splitter.feed(data):
                answer = _answer(conn, line)
                if answer is not None:
                    _send(wfd, protocol.encode(answer))
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client went away: nothing is left to answer
    return EXIT_OK


def _answer(conn: protocol.McpConnection, line: bytes | None) -> object:
    """The answer to one line (None: nothing to say)."""
    if line is None:
        _log(f"a request line over {protocol.MAX_LINE} bytes was dropped")
        return protocol.error(
            None, protocol.PARSE_ERROR, f"the line is longer than {protocol.MAX_LINE} bytes"
        )
    if not line.strip():
        return None
    msg, why = protocol.parse_line(line)
    if why:
        _log(why)
        return protocol.error(None, protocol.PARSE_ERROR, why)
    answer = conn.receive(msg)
    if isinstance(answer, list):
        return [_called(conn, a) for a in answer]
    return _called(conn, answer)


def _called(conn: protocol.McpConnection, answer: object) -> object:
    if isinstance(answer, protocol.ToolCall):
        text, is_error = tools.call(answer.name, answer.arguments, answer.meta)
        return conn.tool_result(answer, text, is_error)
    return answer
