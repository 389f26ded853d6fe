"""Fuzz: ``hosts.toml`` as hostile data (issue 25 build 3 and 6): generated and mutated topologies.

In process, ``sotd.topology.parse`` on generated documents (any type in any place, lists and inline tables
nested deep, NUL, newlines and escapes in strings, ``ssh:`` endpoints of every bad form, huge strings and
numbers) and on byte mutations of a good file (bytes inserted, dropped, doubled, cut). Then a bounded number
through real processes: ``sotd topology relay-endpoint`` and a running daemon told to read the file again.

Oracle (docs/daemon.md, "hosts.toml": an unreadable topology is reported, never fatal): ``parse`` gives
``TopologyError`` (its sentence one line, starting ``this box's hosts.toml cannot be read``) or a
``Topology`` whose every name is a plain host name and whose every endpoint the dial accepts as it is (the
relay endpoint and the link's argv are built without an exception). Through processes: no traceback, exit
1 with that one line from ``relay-endpoint``; a daemon stays up, answers a good client, never answers its
reload ``internal``, and logs no traceback.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sotd import topology
from sotd.client.dial import parse_endpoint
from sotd.daemon import links
from tests.conftest import SOTD, clean_env, wait_for
from tests.fuzz.conftest import Cases, fuzz
from tests.fuzz.kit import nasty_text, scratch_dir
from tests.integration.test_daemon import Daemon, folder

pytestmark = pytest.mark.integration

# The sentence's start in every version (docs/daemon.md; issue 25 writes it "… cannot be read: <why>").
UNREADABLE = "this box's hosts.toml cannot be read"
GOOD = b'hub = "boxa"\n\n[boxes.boxa]\nssh = "boxa.lan"\n\n[boxes.boxb]\nendpoint = "unix:/run/x/sotd.sock"\n'

# The forms issue 25 found (each crashed a real process), and their neighbours.
BAD_ENDPOINTS = [
    "ssh:Boxa/boxa", "ssh:", "ssh:/boxa", "ssh:-oProxyCommand=touch${IFS}/tmp/x", "ssh:boxa/", "ssh:boxa/Boxa",
    "ssh:boxa/-o", "ssh:a b/boxa", "ssh:boxa//boxa", "ssh:\x00", "ssh:boxa\x00/boxa", "ssh:boxa/boxa\n",
    "ssh:boxa\nssh:boxb", "unix:", "unix:rel/sock", "unix:/a\x00b", "unix:/a\nb", "unix:/a\rb", "unix:/\x1b[2J",
    "tcp:127.0.0.1:1", "pipe:x", "ssh", "unix", "SSH:boxa", " ssh:boxa", "ssh:boxa ", "ssh:é/boxa",
]  # fmt: skip
HOSTS = ["boxa", "boxb", "b0x.x-y_z", "Boxa", "", "-o", "a b", "box\x00a", "box\na", "é", "a/b", "..", "9"]


def toml_string(s: str) -> str:
    out = []
    for ch in s:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\u{o:04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


class Raw(str):
    """A TOML value written as is (nesting, huge numbers, dates: forms the emitter does not build)."""


def toml_value(v: Any) -> str:
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    assert isinstance(v, dict)
    return "{" + ", ".join(f"{toml_string(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


def no_surrogates(s: str) -> bool:
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in s)


text = nasty_text.filter(no_surrogates)
deep = st.sampled_from([1, 40, 200, 500, 3000]).flatmap(
    lambda n: st.sampled_from([Raw("[" * n + "]" * n), Raw("{a = " * n + "1" + "}" * n),
                               Raw("[" * n + "{a = 1}" + "]" * n)])
)  # fmt: skip
huge = st.sampled_from([
    Raw("9" * 5000), Raw("-" + "1" * 4400), Raw("1e999999"), Raw("0x" + "f" * 3000), Raw("1979-05-27T07:32:00Z"),
    Raw("1979-13-45"), Raw('"' + "x" * 200_000 + '"'), Raw("'''" + "\n" * 1000 + "'''"),
])  # fmt: skip
scalar = st.one_of(st.booleans(), st.integers(-(2**70), 2**70), st.floats(), text, huge)
anything = st.recursive(
    scalar,
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(text, kids, max_size=3)),
    max_leaves=5,
)
host_value = st.one_of(st.sampled_from(HOSTS), text, anything, deep)
endpoint_value = st.one_of(
    st.sampled_from(BAD_ENDPOINTS),
    st.tuples(st.sampled_from(["ssh:", "unix:", "unix:/", ""]), st.one_of(st.sampled_from(HOSTS), text),
              st.one_of(st.just(""), st.sampled_from(HOSTS).map(lambda h: "/" + h), text.map(lambda t: "/" + t)))
    .map("".join),
    anything,
    deep,
)  # fmt: skip
box_spec = st.one_of(
    st.fixed_dictionaries({}, optional={"ssh": host_value, "endpoint": endpoint_value, "extra": anything}),
    anything,
)


@st.composite
def document(draw: Any) -> bytes:
    lines = []
    if draw(st.integers(0, 9)):
        lines.append(f"hub = {toml_value(draw(host_value))}")
    if draw(st.integers(0, 5)) == 0:
        lines.append(f"boxes = {toml_value(draw(st.one_of(anything, deep)))}")
    else:
        names = draw(st.lists(st.one_of(st.sampled_from(HOSTS), text), max_size=4, unique=True))
        for name in names:
            spec = draw(box_spec)
            if isinstance(spec, dict) and not isinstance(spec, Raw):
                lines.append(f"[boxes.{toml_string(name)}]")
                lines.extend(f"{k} = {toml_value(v)}" for k, v in spec.items())
            else:
                lines.append(f"boxes.{toml_string(name)} = {toml_value(spec)}")
    return ("\n".join(lines) + "\n").encode("utf-8")


@st.composite
def mutated(draw: Any) -> bytes:
    data = bytearray(draw(st.sampled_from([GOOD, GOOD.replace(b"ssh = ", b'endpoint = "ssh:') + b"\n"])))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["insert", "drop", "double", "cut", "byte"]))
        if op == "insert":
            data[at:at] = draw(
                st.one_of(
                    st.binary(min_size=1, max_size=6),
                    st.sampled_from([b"\x00", b"\n", b"\r", b"\xff", b'"', b"[", b"{", b"\\"]),
                )
            )
        elif op == "drop":
            del data[at : at + draw(st.integers(1, 12))]
        elif op == "double":
            data[at:at] = data[at : at + draw(st.integers(1, 20))]
        elif op == "cut":
            del data[at:]
        elif data:
            data[min(at, len(data) - 1)] = draw(st.integers(0, 255))
    return bytes(data)  # fmt: skip


def held(data: bytes, runtime_dir: str) -> None:
    """The in-process oracle for one file's bytes."""
    try:
        topo = topology.parse(data, "hosts.toml")
    except topology.TopologyError as e:
        sentence = topology.unreadable_text(e.message)
        assert sentence.startswith(UNREADABLE), sentence
        assert not any(c in sentence for c in "\n\r\x00"), sentence  # one line
        return
    assert topology.plain_host(topo.hub), topo
    env = {"XDG_RUNTIME_DIR": runtime_dir}
    for name, box in topo.boxes.items():
        assert topology.plain_host(name) and topology.plain_host(box.ssh), box
        if box.endpoint:
            assert parse_endpoint(box.endpoint)[0] is not None, box
            assert not any(c < " " or c == "\x7f" for c in box.endpoint), box
    for host in {"boxa", "boxb", "zed", topo.hub, *topo.boxes}:
        ep = topology.relay_endpoint(topo, host)
        if ep is not None:
            assert "\n" not in ep and "\x00" not in ep, (
                ep
            )  # the first line relay-endpoint prints is all of it
            links.link_argv(ep, "boxb", env)


@pytest.fixture(scope="module")
def runtime_dir() -> Iterator[str]:
    with scratch_dir() as d:
        os.chmod(d, 0o700)
        yield d


@fuzz(150)
@given(data=document())
def test_fuzz_generated_topologies_parse_or_refuse(runtime_dir: str, cases: Cases, data: bytes) -> None:
    cases.one()
    held(data, runtime_dir)


@fuzz(200)
@given(data=mutated())
def test_fuzz_mutated_topologies_parse_or_refuse(runtime_dir: str, cases: Cases, data: bytes) -> None:
    cases.one()
    held(data, runtime_dir)


def test_fuzz_topology_oracle_sees_a_good_file_and_a_bad_one(runtime_dir: str) -> None:
    """The oracle can tell the two outcomes apart: the good file reads, a plainly bad one refuses."""
    held(GOOD, runtime_dir)
    assert topology.parse(GOOD).boxes["boxb"].endpoint == "unix:/run/x/sotd.sock"
    with pytest.raises(topology.TopologyError):
        topology.parse(b"hub = 3\n")


# ---------------------------------------------------------------------------------- the named forms

NAMED = {
    "a list nested 500 deep": b"hub = " + b"[" * 500 + b"]" * 500 + b"\n",
    "an inline table nested 500 deep": b'hub = "boxa"\nboxes = ' + b"{a = " * 500 + b"1" + b"}" * 500 + b"\n",
    "a number past int's digit limit": b"hub = " + b"9" * 5000 + b"\n",
    **{f"hub endpoint {ep!r}": (f'hub = "boxa"\n[boxes.boxa]\nendpoint = {toml_string(ep)}\n[boxes.boxb]\n'
                                .encode()) for ep in BAD_ENDPOINTS[:18]},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(NAMED))
def test_each_form_issue_25_found_is_refused_in_process(runtime_dir: str, name: str) -> None:
    """Issue 25 item 4's root causes, one by one (``RecursionError``, ``ValueError``, NUL, newline)."""
    with pytest.raises(topology.TopologyError) as got:
        topology.parse(NAMED[name], "hosts.toml")
    assert topology.unreadable_text(got.value.message).startswith(UNREADABLE)
    held(NAMED[name], runtime_dir)


# ----------------------------------------------------------------------------- through real processes

PROCESS_NAMED = ["a list nested 500 deep", "hub endpoint 'ssh:Boxa/boxa'", "hub endpoint 'ssh:'",
                 "hub endpoint 'ssh:/boxa'", "hub endpoint 'unix:/a\\x00b'", "hub endpoint 'unix:/a\\nb'",
                 "hub endpoint 'ssh:-oProxyCommand=touch${IFS}/tmp/x'"]  # fmt: skip


def relay_endpoint(work: str, data: bytes) -> subprocess.CompletedProcess[bytes]:
    path = os.path.join(work, "hosts.toml")
    with open(path, "wb") as f:
        f.write(data)
    env = clean_env()
    env.update(SOT_HOSTS_TOML=path, SOT_SELF_HOST="boxb", SOT_COMM_HOME=os.path.join(work, "comm"),
               SOT_SSH_CONFIG=os.path.join(work, "ssh_config"), XDG_RUNTIME_DIR=work)  # fmt: skip
    return subprocess.run([SOTD, "topology", "relay-endpoint"], env=env, capture_output=True, timeout=60,
                          check=False)  # fmt: skip


def refused_in_one_line(p: subprocess.CompletedProcess[bytes]) -> None:
    assert b"Traceback" not in p.stderr, p.stderr.decode(errors="replace")
    assert (p.returncode, p.stdout) == (1, b""), p
    lines = p.stderr.decode("utf-8").splitlines()
    assert len(lines) == 1 and lines[0].startswith(UNREADABLE), p.stderr


@pytest.mark.parametrize("name", PROCESS_NAMED)
def test_relay_endpoint_refuses_each_form_issue_25_found_in_one_line(tmp_path: Any, name: str) -> None:
    refused_in_one_line(relay_endpoint(str(tmp_path), NAMED[name]))


@fuzz(4)
@given(data=st.one_of(document(), mutated()))
def test_fuzz_relay_endpoint_process(tmp_path_factory: Any, cases: Cases, data: bytes) -> None:
    """A few generated files through the real command: the endpoint (one line, exit 0) or the refusal."""
    cases.one()
    work = str(tmp_path_factory.mktemp("relay"))
    p = relay_endpoint(work, data)
    assert b"Traceback" not in p.stderr, (data[:300], p.stderr.decode(errors="replace"))
    if p.returncode == 0:
        assert p.stdout.count(b"\n") == 1 and p.stderr == b"", p
    else:
        refused_in_one_line(p)


def ssh_to_loopback(work: str) -> str:
    """An ssh config that sends every name to 127.0.0.1 port 1 (refused at once): no name is looked up."""
    path = os.path.join(work, "ssh_config")
    with open(path, "w") as f:
        f.write("Host *\n  HostName 127.0.0.1\n  Port 1\n  BatchMode yes\n  ConnectTimeout 1\n"
                "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n")  # fmt: skip
    return path


@pytest.fixture
def guest_with_a_bad_hub_endpoint(tmp_path: Any) -> Iterator[tuple[Daemon, str]]:
    """A guest daemon started with issue 25's ``ssh:Boxa/boxa`` hub endpoint (it exited 1 at start)."""
    work = str(tmp_path)
    hosts = os.path.join(work, "hosts.toml")
    with open(hosts, "wb") as f:
        f.write(NAMED["hub endpoint 'ssh:Boxa/boxa'"])
    env = {"SOT_SSH_CONFIG": ssh_to_loopback(work), "XDG_RUNTIME_DIR": work,
           "SOTD_TEST_TOPOLOGY_CHECK_SECS": "3600"}  # fmt: skip
    d = Daemon(work, "guest", folder(work, "comm").home, "boxb", env=env)
    try:
        yield d, hosts
    finally:
        d.stop()


def test_a_daemon_reads_bad_topologies_again_and_keeps_serving(
    guest_with_a_bad_hub_endpoint: tuple[Daemon, str],
) -> None:
    """Issue 25 item 4 through a running daemon: started with a bad hub endpoint it serves; each named form
    and a few generated ones written and read again (``daemon.reload``, and one SIGHUP) leave it serving,
    its reload answered (never ``internal``), its log without a traceback and naming the reason."""
    d, hosts = guest_with_a_bad_hub_endpoint
    time.sleep(0.5)  # the link task (if any) has run once
    assert d.proc.poll() is None, d.logtext()
    files = [NAMED[n] for n in PROCESS_NAMED] + [GOOD.replace(b"boxa.lan", b"Boxa")]
    for i, data in enumerate(files):
        with open(hosts, "wb") as f:
            f.write(data)
        if i == 0:
            d.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: d.logtext().count("SIGHUP") >= 1, what="the SIGHUP read")
            time.sleep(0.3)
        else:
            answer = d.request("daemon.reload", {})
            assert answer.get("code") != "internal", (data[:200], answer)
        assert d.proc.poll() is None, (data[:200], d.logtext()[-3000:])
        assert d.request("version.query", {})["daemon"]["host"] == "boxb"
    log = d.logtext()
    assert "Traceback" not in log and "RecursionError" not in log and "ValueError" not in log, log[-4000:]
    assert UNREADABLE in log, log[-2000:]


@fuzz(6)
@given(data=st.one_of(document(), mutated()))
def test_fuzz_a_running_daemon_reads_generated_topologies(
    shared_guest: tuple[Daemon, str], cases: Cases, data: bytes
) -> None:
    cases.one()
    d, hosts = shared_guest
    with open(hosts, "wb") as f:
        f.write(data)
    answer = d.request("daemon.reload", {})
    assert answer.get("code") != "internal", (data[:300], answer)
    assert d.proc.poll() is None, (data[:300], d.logtext()[-3000:])
    assert d.request("version.query", {})["daemon"]["host"] == "boxb"
    log = d.logtext()
    assert "Traceback" not in log, (data[:300], log[-4000:])


@pytest.fixture(scope="module")
def shared_guest() -> Iterator[tuple[Daemon, str]]:
    with scratch_dir() as work:
        hosts = os.path.join(work, "hosts.toml")
        with open(hosts, "wb") as f:
            f.write(GOOD)
        env = {"SOT_SSH_CONFIG": ssh_to_loopback(work), "XDG_RUNTIME_DIR": work,
               "SOTD_TEST_TOPOLOGY_CHECK_SECS": "3600"}  # fmt: skip
        d = Daemon(work, "guest", folder(work, "comm").home, "boxb", env=env)
        try:
            yield d, hosts
        finally:
            d.stop()
