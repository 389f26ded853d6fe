"""The NFS tier's points, run inside the guest by init.sh: facts measured on real NFS, written to results.json.

File: ``tests/nfs/guest/points.py`` (guest side; not collected by pytest: no ``test_`` prefix).
Spec: seed 000 "The lock manager", "The inbox", "The registry lock", "registry.json"; behaviour 6.1-6.5.
Each point runs this checkout's sotd (reached over 9p) on host A (the guest's root namespaces, mounts
``/mnt/a4`` v4.2 and ``/mnt/a3`` v3) and host B (its own network, UTS, mount and pid namespaces, machine id
and boot id; mounts ``/mnt/b4``, ``/mnt/b3`` and the ``nocto`` ones), and records what it saw; the host-side
tests (``tests/nfs/test_nfs.py``) assert on those facts, one test per point and version. A point that raises
records its traceback, so one broken point never hides the others.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

SHARE = sys.argv[1] if len(sys.argv) > 1 else "/share"
HOSTB_PID = os.environ.get("SOTD_NFS_HOSTB_PID", "")
PY = sys.executable
SOTD = os.path.join(os.path.dirname(PY), "sotd")
HERE = os.path.dirname(os.path.abspath(__file__))
HELPER = os.path.join(HERE, "helper.py")
MOUNTS = {"v4": ("/mnt/a4", "/mnt/b4", "/mnt/b4nocto"), "v3": ("/mnt/a3", "/mnt/b3", "/mnt/b3nocto")}
HOST_A, HOST_B = "nfsvm", "hostb"
# a run beside the main one in the same boot (the clone test's): its folders' suffix and its results file
TAG = os.environ.get("SOTD_NFS_TAG", "")
RESULTS = os.environ.get("SOTD_NFS_RESULTS", "results.json")
T0 = time.monotonic()
results: dict[str, Any] = {}


def log(*a: object) -> None:
    print(f"[points +{time.monotonic() - T0:.1f}s]", *a, flush=True)


def on_b(argv: list[str]) -> list[str]:
    """``argv`` run inside host B's namespaces (network, UTS, mount, pid)."""
    return ["nsenter", "-t", HOSTB_PID, "-n", "-u", "-m", "-p", "--", *argv]


def run(
    argv: list[str],
    *,
    host: str,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[str]:
    full = on_b(argv) if host == "b" else argv
    return subprocess.run(
        full, env=env, capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd
    )


def spawn(argv: list[str], *, host: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    full = on_b(argv) if host == "b" else argv
    return subprocess.Popen(full, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def helper(host: str, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``helper.py <args>`` on ``host``; its last stdout line is JSON."""
    p = run([PY, HELPER, *args], host=host, timeout=timeout, env=env)
    lines = p.stdout.strip().splitlines()
    try:
        return dict(json.loads(lines[-1]))
    except (IndexError, ValueError):
        return {
            "error": f"helper {args[0]} on {host} exit {p.returncode}: {p.stdout[-2000:]} {p.stderr[-2000:]}"
        }


def session_env(home: str, host: str, name: str, work: str, **extra: str) -> dict[str, str]:
    """The environment of one agent session: its comm folder, declared host, pinned self file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SOT_", "SOTD_"))}
    env.update(
        SOT_COMM_HOME=home,
        SOT_SELF_HOST=host,
        SOT_COMM_TEST_HOST=host,
        SOT_COMM_SELF_FILE=os.path.join(home, "self", f"{name}-session.txt"),
        SOT_SOCKET=os.path.join(work, "no-daemon.sock"),
        PWD=os.path.join(work, name),
    )
    env.update(extra)
    return env


def comm(host: str, env: dict[str, str], *args: str, timeout: float = 60) -> dict[str, Any]:
    os.makedirs(env["PWD"], exist_ok=True)
    t = time.monotonic()
    p = run([SOTD, "comm", *args], host=host, env=env, timeout=timeout, cwd=env["PWD"])
    return {"code": p.returncode, "out": p.stdout, "err": p.stderr, "secs": round(time.monotonic() - t, 3)}


def read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


class Daemon:
    """``sotd daemon run`` on a host, stopped with SIGTERM (then SIGKILL) at the end of the point."""

    def __init__(self, host: str, name: str, home: str, work: str, hosts_toml: str | None) -> None:
        self.sock = os.path.join(work, f"{name}.sock")
        self.log = os.path.join(work, f"{name}.log")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SOT_", "SOTD_"))}
        env.update(SOT_COMM_HOME=home, SOT_SELF_HOST=HOST_A if host == "a" else HOST_B)
        if hosts_toml:
            env["SOT_HOSTS_TOML"] = hosts_toml
        self.out = open(self.log, "wb")  # noqa: SIM115 - closed in stop()
        full = [SOTD, "daemon", "run", "--socket", self.sock]
        self.proc = subprocess.Popen(
            on_b(full) if host == "b" else full, env=env, stdout=self.out, stderr=self.out
        )

    def wait_up(self, secs: float = 60) -> bool:
        deadline = time.monotonic() + secs
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if os.path.exists(self.sock + ".status.json"):
                return True
            time.sleep(0.2)
        return False

    def text(self) -> str:
        return read(self.log)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.out.close()


# ------------------------------------------------------------------------------------------------ points


def folders(ver: str, name: str) -> tuple[str, str, str]:
    """(comm folder on A, the same folder as B mounts it, a local work folder) of the point ``name``; a
    second run in the same boot (``SOTD_NFS_TAG``: the clone's) gets folders of its own."""
    a_mnt, b_mnt, _ = MOUNTS[ver]
    name += TAG
    return f"{a_mnt}/{name}", f"{b_mnt}/{name}", f"/tmp/{name}"


def point_record(ver: str) -> dict[str, Any]:
    """The lock-manager record: the hub writes it; host B computes the same manager (v4.2) and appends
    itself, or (v3) hands the line to its daemon and the hub files it."""
    home_a, home_b, work = folders(ver, f"record-{ver}")
    os.makedirs(work, exist_ok=True)
    os.makedirs(home_a, exist_ok=True)
    toml = os.path.join(home_a, "hosts.toml")
    hub_sock = os.path.join(work, "hub.sock")
    with open(toml, "w") as f:
        f.write(f'hub = "{HOST_A}"\n\n[boxes.{HOST_A}]\nendpoint = "unix:{hub_sock}"\n\n[boxes.{HOST_B}]\n')
    facts: dict[str, Any] = {}
    hub = Daemon("a", "hub", home_a, work, os.path.join(home_a, "hosts.toml"))
    guest: Daemon | None = None
    try:
        facts["hub_up"] = hub.wait_up()
        rec_path = os.path.join(home_a, "inbox-lock-manager")
        facts["record"] = read(rec_path) if os.path.exists(rec_path) else None
        facts["machine_id_a"] = read("/etc/machine-id").strip()
        facts["identity_b"] = helper("b", "identity", home_b)
        if ver == "v3":
            guest = Daemon("b", "guest", home_b, work, os.path.join(home_b, "hosts.toml"))
            facts["guest_up"] = guest.wait_up()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and f"link from {HOST_B} (" not in hub.text():
                time.sleep(0.3)
            facts["guest_linked"] = f"link from {HOST_B} (" in hub.text()
        ea = session_env(home_a, HOST_A, "alpha", work)
        eb = session_env(
            home_b, HOST_B, "beta", work, **({"SOT_SOCKET": guest.sock} if guest is not None else {})
        )
        facts["join_a"] = comm("a", ea, "join", "--name", "alpha")
        facts["join_b"] = comm("b", eb, "join", "--name", "beta")
        facts["send_b"] = comm("b", eb, "send", "@alpha", f"from B over {ver}")
        facts["send_a"] = comm("a", ea, "send", "@beta", f"from A over {ver}")
        facts["inbox_alpha"] = read(os.path.join(home_a, "inbox", "alpha.jsonl"))
        facts["inbox_beta"] = read(os.path.join(home_a, "inbox", "beta.jsonl"))
    finally:
        facts["hub_log"] = hub.text()[-3000:]
        hub.stop()
        if guest is not None:
            facts["guest_log"] = guest.text()[-3000:]
            guest.stop()
    return facts


def fresh_home(ver: str, name: str) -> tuple[str, str, str]:
    """(home on A, the same folder on B, a local work folder) for one point, with a hub's record written
    the way the hub writes it (``lockmanager.write_for_hub`` on host A)."""
    from sotd.formats import lockmanager
    from sotd.formats.layout import Layout, ensure_home

    home_a, home_b, work = folders(ver, name)
    os.makedirs(work, exist_ok=True)
    lay = Layout(home_a)
    ensure_home(lay)
    lockmanager.write_for_hub(
        lay, lockmanager.lock_manager_of(lay.inbox_dir), lockmanager.machine_id_or_none()
    )
    return home_a, home_b, work


def inbox_census(path: str, writers: dict[str, int]) -> dict[str, Any]:
    """Whole lines, torn lines, and per writer how many of its sequence numbers are there once / twice."""
    data = b""
    if os.path.exists(path):
        with open(path, "rb") as f:
            data = f.read()
    whole, torn = 0, 0
    seen: dict[str, dict[int, int]] = {w: {} for w in writers}
    for raw in data.split(b"\n")[:-1]:
        try:
            obj = json.loads(raw)
            who, seq = str(obj["msg"]).split(" ")[:2]
            seen[who][int(seq)] = seen[who].get(int(seq), 0) + 1
            whole += 1
        except (ValueError, KeyError):
            torn += 1
    return {
        "lines": whole,
        "torn": torn,
        "unterminated_tail": not data.endswith(b"\n") and bool(data),
        "missing": {w: n - len(seen[w]) for w, n in writers.items()},
        "repeated": {w: sum(1 for c in seen[w].values() if c > 1) for w in writers},
    }


def point_appends(ver: str, mode: str, n: int) -> dict[str, Any]:
    """2 hosts x ``n`` appends to one inbox at once, through sotd (``mode`` sotd) or plain O_APPEND."""
    home_a, home_b, work = fresh_home(ver, f"append-{mode}-{ver}")
    go = os.path.join(work, "go")
    pa = spawn([PY, HELPER, "append", home_a, "sink", "A", str(n), mode, go], host="a")
    pb = spawn([PY, HELPER, "append", home_b, "sink", "B", str(n), mode, go], host="b")
    time.sleep(3)  # both started (python and sotd imported) before the go
    open(go, "w").close()
    outs = {}
    for who, p in (("A", pa), ("B", pb)):
        out, err = p.communicate(timeout=240)
        try:
            outs[who] = json.loads(out.strip().splitlines()[-1])
        except (IndexError, ValueError):
            outs[who] = {"error": f"exit {p.returncode}: {out[-1500:]} {err[-1500:]}"}
    census = inbox_census(os.path.join(home_a, "inbox", "sink.jsonl"), {"A": n, "B": n})
    wall = max(float(o.get("secs", 0)) for o in outs.values())
    return {
        "writers": outs,
        "census": census,
        "expected": 2 * n,
        "wall_secs": wall,
        "appends_per_sec": round(2 * n / wall, 1) if wall else None,
    }


def point_appends_v3_via_hub(n: int, name: str = "append-hub-v3", b_waits: str = "5") -> dict[str, Any]:
    """v3: host A appends ``n`` lines itself while host B hands ``n`` to its daemon, which forwards them up
    its link to the hub on A, which files them: both at once, into one inbox. ``b_waits``: how long B's
    sender waits for each verdict (``helper.py file_via_daemon``'s ``waits_s``)."""
    from sotd import _clock
    from sotd.formats import registry
    from sotd.formats.layout import Layout

    home_a, home_b, work = folders("v3", name)
    os.makedirs(work, exist_ok=True)
    os.makedirs(home_a, exist_ok=True)
    hub_sock = os.path.join(work, "hub.sock")
    with open(os.path.join(home_a, "hosts.toml"), "w") as f:
        f.write(f'hub = "{HOST_A}"\n\n[boxes.{HOST_A}]\nendpoint = "unix:{hub_sock}"\n\n[boxes.{HOST_B}]\n')
    lay = Layout(home_a)
    registry.ensure(lay)
    registry.update(
        lay,
        HOST_A,
        lambda d: (
            True,
            registry.put(
                d,
                "sink",
                {"host": HOST_A, "last_seen": _clock.stamp(_clock.now() + 3600), "root": "/nowhere"},
            ),
        ),
        bound=10.0,
    )
    hub = Daemon("a", "hub", home_a, work, os.path.join(home_a, "hosts.toml"))
    guest = Daemon("b", "guest", home_b, work, os.path.join(home_b, "hosts.toml"))
    facts: dict[str, Any] = {}
    try:
        facts["hub_up"], facts["guest_up"] = hub.wait_up(), guest.wait_up()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and f"link from {HOST_B} (" not in hub.text():
            time.sleep(0.3)
        facts["guest_linked"] = f"link from {HOST_B} (" in hub.text()
        go = os.path.join(work, "go")
        pa = spawn([PY, HELPER, "append", home_a, "sink", "A", str(n), "sotd", go], host="a")
        pb = spawn([PY, HELPER, "file_via_daemon", guest.sock, "sink", "B", str(n), go, b_waits], host="b")
        time.sleep(3)
        open(go, "w").close()
        outs = {}
        for who, p in (("A", pa), ("B", pb)):
            out, err = p.communicate(timeout=240)
            try:
                outs[who] = json.loads(out.strip().splitlines()[-1])
            except (IndexError, ValueError):
                outs[who] = {"error": f"exit {p.returncode}: {out[-1500:]} {err[-1500:]}"}
        facts["writers"] = outs
        facts["census"] = inbox_census(lay.inbox("sink"), {"A": n, "B": n})
        filed_b: set[int] = set()
        with open(lay.inbox("sink"), "rb") as f:
            for raw in f.read().split(b"\n")[:-1]:
                try:
                    who, seq = str(json.loads(raw)["msg"]).split(" ")[:2]
                except (ValueError, KeyError):
                    continue  # a torn line: counted by the census
                if who == "B":
                    filed_b.add(int(seq))
        facts["failed_but_filed"] = sorted(set(outs["B"].get("failed_seq", [])) & filed_b)
        # the hub's (or the guest's) warning that an ok went out after its sender's deadline: the one way
        # a line told FAILED may be filed (docs/contract.md "A filing's deadline"), never silent
        facts["late_oks"] = [
            row[-300:] for d in (hub, guest) for row in d.text().splitlines() if "ok went out" in row
        ]
        facts["expected"] = 2 * n
    finally:
        facts["hub_log"] = hub.text()[-2000:]
        facts["guest_log"] = guest.text()[-2000:]
        hub.stop()
        guest.stop()
    return facts


def point_killed_holder(ver: str, *, inbox_lock: bool) -> dict[str, Any]:
    """An inbox lock holder on host B (half its line written) and a registry lock holder on host B, each
    SIGKILLed: A gets the inbox lock at once and cuts the torn half; A's proof-of-death rules refuse to
    force B's registry lock and name B; B itself reclaims it."""
    from sotd.errors import SotdError
    from sotd.formats import inbox, lockmanager
    from sotd.formats.layout import Layout

    home_a, home_b, work = fresh_home(ver, f"kill-{ver}")
    lay = Layout(home_a)
    facts: dict[str, Any] = {}
    ready = os.path.join(work, "inbox.ready")
    hb = spawn([PY, HELPER, "hold_inbox", home_b, "sink", "B", ready], host="b") if inbox_lock else None
    deadline = time.monotonic() + 60
    while hb and not os.path.exists(ready) and time.monotonic() < deadline and hb.poll() is None:
        time.sleep(0.05)
    facts["inbox_held"] = os.path.exists(ready)
    if hb and facts["inbox_held"]:
        facts["size_before_kill"] = os.path.getsize(lay.inbox("sink"))
        bpid = read(ready).strip()
        kill = run(["kill", "-KILL", bpid], host="b")
        t = time.monotonic()
        own = lockmanager.own_lock(lay)
        notes: list[str] = []
        line = inbox.encode_line("A", "sink", "nfs", "A 00000 after the kill", "2026-01-01T00:00:00Z")
        try:
            inbox.append(lay, "sink", line, nfs=lockmanager.is_nfs(own or ""), bound=2.0, note=notes.append)
            facts["a_append"] = "filed"
        except SotdError as e:
            facts["a_append"] = e.message
        facts["lock_free_after_secs"] = round(time.monotonic() - t, 3)
        facts["kill_rc"] = kill.returncode
        facts["notes"] = notes
        facts["inbox"] = read(lay.inbox("sink"))
    if hb:
        hb.kill()
        hb.wait(10)
    # the registry lock: held on B, B's holder SIGKILLed
    ready = os.path.join(work, "reg.ready")
    hr = spawn([PY, HELPER, "hold_reglock", home_b, HOST_B, ready], host="b")
    deadline = time.monotonic() + 60
    while not os.path.exists(ready) and time.monotonic() < deadline and hr.poll() is None:
        time.sleep(0.05)
    facts["reglock_held"] = os.path.exists(ready)
    if facts["reglock_held"]:
        bpid, record = read(ready).split(" ", 1)
        facts["b_record"] = record
        run(["kill", "-KILL", bpid], host="b")
        facts["a_take"] = helper("a", "take_reglock", home_a, HOST_A, "1")
        facts["lock_file_after_a"] = read(lay.reglock) if os.path.exists(lay.reglock) else None
        facts["b_take"] = helper("b", "take_reglock", home_b, HOST_B, "10")
        facts["a_take_after_b"] = helper("a", "take_reglock", home_a, HOST_A, "1")
    hr.kill()
    hr.wait(10)
    return facts


def point_registry(ver: str, n: int) -> dict[str, Any]:
    """Registry writes from both hosts at once (joins, touches, leaves; each also bumps a shared counter),
    with a reader on each host parsing every read; then the final registry."""
    from sotd.formats import registry
    from sotd.formats.layout import Layout

    home_a, home_b, work = fresh_home(ver, f"registry-{ver}")
    go = os.path.join(work, "go")
    pa = spawn([PY, HELPER, "registry_churn", home_a, HOST_A, str(n), go, "3"], host="a")
    pb = spawn([PY, HELPER, "registry_churn", home_b, HOST_B, str(n), go, "3"], host="b")
    time.sleep(3)
    open(go, "w").close()
    outs: dict[str, Any] = {}
    for who, p in ((HOST_A, pa), (HOST_B, pb)):
        out, err = p.communicate(timeout=240)
        try:
            outs[who] = json.loads(out.strip().splitlines()[-1])
        except (IndexError, ValueError):
            outs[who] = {"error": f"exit {p.returncode}: {out[-1500:]} {err[-1500:]}"}
    doc = registry.read(Layout(home_a))
    return {"writers": outs, "final": doc, "n": n}


def point_stale_read(ver: str, rounds: int) -> dict[str, Any]:
    """The stale-handle window made certain, ``rounds`` times: host B writes the registry; host A opens it
    and pauses before its read; B renames a new registry over it; A reads (the first try of
    ``registry.read_bytes``, whose retries then run as they are). Host A never wrote the file, so none of
    it is in A's page cache and the read goes to the server."""
    home_a, home_b, work = fresh_home(ver, f"stale-read-{ver}")
    out: list[dict[str, Any]] = []
    for k in range(rounds):
        put = helper("b", "registry_put", home_b, HOST_B, f"before-{k}")
        if "error" in put:
            out.append({"before": put})
            continue
        opened, renamed = os.path.join(work, f"opened-{k}"), os.path.join(work, f"renamed-{k}")
        reader = spawn([PY, HELPER, "stale_read", home_a, opened, renamed], host="a")
        deadline = time.monotonic() + 60
        while not os.path.exists(opened) and time.monotonic() < deadline and reader.poll() is None:
            time.sleep(0.02)
        after = helper("b", "registry_put", home_b, HOST_B, f"after-{k}")
        open(renamed, "w").close()
        stdout, stderr = reader.communicate(timeout=120)
        try:
            got = dict(json.loads(stdout.strip().splitlines()[-1]))
        except (IndexError, ValueError):
            got = {"error": f"exit {reader.returncode}: {stdout[-1500:]} {stderr[-1500:]}"}
        got["after"] = after
        out.append(got)
    return {"rounds": out}


def point_nocto(ver: str) -> dict[str, Any]:
    """The registry lock's holder record taken on host B through a ``nocto`` mount and a normal one."""
    _home_a, home_b, _work = fresh_home(ver, f"nocto-{ver}")
    nocto_home = home_b.replace(MOUNTS[ver][1], MOUNTS[ver][2], 1)
    return {
        "nocto": helper("b", "take_reglock", nocto_home, HOST_B, "5"),
        "cto": helper("b", "take_reglock", home_b, HOST_B, "5"),
        "nocto_mount": [
            x for x in run(["cat", "/proc/mounts"], host="b").stdout.splitlines() if MOUNTS[ver][2] in x
        ],
    }


def point_partition(ver: str) -> dict[str, Any]:
    """Host B holds the inbox lock (paused inside ``inbox.append`` before its write) and is cut off past the
    lease; A takes the lock and appends; the link heals; B's late write goes on."""
    from sotd.errors import SotdError
    from sotd.formats import inbox, lockmanager
    from sotd.formats.layout import Layout

    home_a, home_b, work = fresh_home(ver, f"partition-{ver}")
    lay = Layout(home_a)
    facts: dict[str, Any] = {}
    notes: list[str] = []
    own = lockmanager.own_lock(lay)
    first = inbox.encode_line("A", "sink", "nfs", "A 00000 before", "2026-01-01T00:00:00Z")
    inbox.append(lay, "sink", first, nfs=lockmanager.is_nfs(own or ""), bound=5.0, note=notes.append)
    ready, go = os.path.join(work, "ready"), os.path.join(work, "go")
    pb = spawn([PY, HELPER, "late_writer", home_b, "sink", "B", ready, go], host="b")
    deadline = time.monotonic() + 60
    while not os.path.exists(ready) and time.monotonic() < deadline and pb.poll() is None:
        time.sleep(0.05)
    facts["b_holds"] = os.path.exists(ready)
    line = inbox.encode_line("A", "sink", "nfs", "A 00001 during the partition", "2026-01-01T00:00:01Z")
    try:
        inbox.append(lay, "sink", line, nfs=lockmanager.is_nfs(own or ""), bound=1.0)
        facts["a_before_cut"] = "filed"
    except SotdError as e:
        facts["a_before_cut"] = e.message
    subprocess.run(["ip", "link", "set", "veth0", "down"], check=True, timeout=10)
    t = time.monotonic()
    facts["a_tries"] = []
    try:
        while time.monotonic() - t < 60:
            try:
                inbox.append(
                    lay, "sink", line, nfs=lockmanager.is_nfs(own or ""), bound=2.0, note=notes.append
                )
                facts["a_got_lock_after_secs"] = round(time.monotonic() - t, 1)
                break
            except SotdError as e:
                facts["a_tries"].append(e.message)
    finally:
        subprocess.run(["ip", "link", "set", "veth0", "up"], check=True, timeout=10)
    facts["size_after_a"] = os.path.getsize(lay.inbox("sink"))
    facts["healed_after_secs"] = round(time.monotonic() - t, 1)
    time.sleep(2)
    open(go, "w").close()
    out, err = pb.communicate(timeout=180)
    try:
        facts["b"] = json.loads(out.strip().splitlines()[-1])
    except (IndexError, ValueError):
        facts["b"] = {"error": f"exit {pb.returncode}: {out[-1500:]} {err[-1500:]}"}
    facts["a_tries"] = [*facts["a_tries"][:3], f"... {len(facts['a_tries'])} tries"]
    facts["notes"] = notes
    facts["inbox"] = read(lay.inbox("sink"))
    facts["inbox_from_b"] = run(["cat", f"{home_b}/inbox/sink.jsonl"], host="b").stdout
    return facts


def point_poll(ver: str, rounds: int, per_round: int) -> dict[str, Any]:
    """Host A appends to a session of host B (sotd ``inbox.append``) while A rewrites the registry
    (renames) all along; after each round B runs ``sotd comm unread`` then ``sotd comm poll``."""
    import threading

    from sotd import _clock
    from sotd.errors import SotdError
    from sotd.formats import inbox, lockmanager, registry
    from sotd.formats.layout import Layout

    home_a, home_b, work = fresh_home(ver, f"poll-{ver}")
    lay = Layout(home_a)
    eb = session_env(home_b, HOST_B, "beta", work)
    facts: dict[str, Any] = {"join_b": comm("b", eb, "join", "--name", "beta")}
    stop = threading.Event()
    renames = [0]

    def churn() -> None:
        while not stop.is_set():
            try:
                registry.update(lay, HOST_A, lambda d: (True, registry.set_last_seen(d, "beta")), bound=5.0)
                renames[0] += 1
            except SotdError:
                pass
            time.sleep(0.2)

    th = threading.Thread(target=churn, daemon=True)
    th.start()
    own = lockmanager.own_lock(lay)
    sent: list[str] = []
    rounds_out = []
    try:
        for r in range(rounds):
            for k in range(per_round):
                msg = f"A {r * per_round + k:05d} round {r}"
                line = inbox.encode_line("alpha", "beta", "nfs", msg, _clock.stamp())
                inbox.append(lay, "beta", line, nfs=lockmanager.is_nfs(own or ""), bound=5.0)
                sent.append(msg)
            rounds_out.append({"unread": comm("b", eb, "unread"), "poll": comm("b", eb, "poll")})
    finally:
        stop.set()
        th.join(10)
    facts.update(sent=sent, rounds=rounds_out, registry_renames=renames[0], own_lock_a=own)
    return facts


def point_send_latency(ver: str, n: int) -> dict[str, Any]:
    """``n`` runs of ``sotd comm send`` from host A to a session of host B, each timed from spawn to exit."""
    home_a, home_b, work = fresh_home(ver, f"send-{ver}")
    ea = session_env(home_a, HOST_A, "alpha", work)
    eb = session_env(home_b, HOST_B, "beta", work)
    facts: dict[str, Any] = {
        "join_a": comm("a", ea, "join", "--name", "alpha"),
        "join_b": comm("b", eb, "join", "--name", "beta"),
    }
    sends = [comm("a", ea, "send", "@beta", f"send {i}") for i in range(n)]
    facts["codes"] = [x["code"] for x in sends]
    facts["outs"] = sorted({x["out"] for x in sends})
    facts["secs_each"] = [x["secs"] for x in sends]
    from sotd.formats.layout import Layout

    facts["inbox_lines"] = len(read(Layout(home_a).inbox("beta")).splitlines())
    return facts


POINTS: list[tuple[str, Callable[[], dict[str, Any]]]] = [
    ("record_v4", lambda: point_record("v4")),
    ("record_v3", lambda: point_record("v3")),
    ("appends_sotd_v4", lambda: point_appends("v4", "sotd", 500)),
    ("appends_plain_v4", lambda: point_appends("v4", "plain", 500)),
    ("appends_plain_v3", lambda: point_appends("v3", "plain", 500)),
    ("appends_hub_v3", lambda: point_appends_v3_via_hub(500)),
    # the same with B's senders waiting 0.45-1.1 s: the hub's deadline then falls before, during and after
    # its lock wait, write and sync (docs/contract.md "A filing's deadline")
    (
        "deadline_hub_v3",
        lambda: point_appends_v3_via_hub(
            100, "deadline-hub-v3", ",".join(f"{0.45 + 0.05 * k:.2f}" for k in range(14))
        ),
    ),
    ("killed_v4", lambda: point_killed_holder("v4", inbox_lock=True)),
    # v3: host B never takes the inbox lock (it hands lines to the daemon); the registry lock it does take
    ("killed_v3", lambda: point_killed_holder("v3", inbox_lock=False)),
    ("registry_v4", lambda: point_registry("v4", 45)),
    ("registry_v3", lambda: point_registry("v3", 45)),
    ("stale_read_v4", lambda: point_stale_read("v4", 3)),
    ("stale_read_v3", lambda: point_stale_read("v3", 3)),
    ("nocto_v4", lambda: point_nocto("v4")),
    ("nocto_v3", lambda: point_nocto("v3")),
    ("send_v4", lambda: point_send_latency("v4", 15)),
    ("poll_v4", lambda: point_poll("v4", 3, 5)),
    ("poll_v3", lambda: point_poll("v3", 3, 5)),
    # last: it cuts host B's link and lets its NFSv4 lease expire
    ("partition_v4", lambda: point_partition("v4")),
]


def cpu_ticks() -> dict[str, int]:
    """The guest's CPU time so far by kind (``/proc/stat``'s first line, in clock ticks): where a point's
    emulated time went (the host sees only QEMU's total)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:8]
    return dict(
        zip(("user", "nice", "system", "idle", "iowait", "irq", "softirq"), map(int, fields), strict=True)
    )


def main() -> None:
    only = os.environ.get("SOTD_NFS_ONLY", "")
    for key, fn in POINTS:
        if only and key not in only.split(","):
            continue
        log(f"point {key}")
        t, c0 = time.monotonic(), cpu_ticks()
        try:
            facts = fn()
        except Exception:  # record it: one broken point never hides the others
            facts = {"error": traceback.format_exc()}
        facts["secs"] = round(time.monotonic() - t, 2)
        facts["cpu_ticks"] = {k: v - c0[k] for k, v in cpu_ticks().items()}
        results[key] = facts
        log(f"point {key} done in {facts['secs']} s; cpu ticks {facts['cpu_ticks']}")
        with open(os.path.join(SHARE, RESULTS + ".tmp"), "w") as f:
            json.dump(results, f, indent=1)
        os.rename(os.path.join(SHARE, RESULTS + ".tmp"), os.path.join(SHARE, RESULTS))


if __name__ == "__main__":
    main()
