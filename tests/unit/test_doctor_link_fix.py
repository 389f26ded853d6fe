"""``sotd doctor``'s fix line for a box that does not answer over its route (issue 27 part 4): the next
step for each link failure by ssh's own words, naming the box each command runs on
(``doctor.daemon_checks.link_fix``)."""

from __future__ import annotations

import pytest

from sotd.cli.doctor import daemon_checks, folder_checks

pytestmark = pytest.mark.unit

RETRY = "then on boxa: sotd daemon reload (the link dials at once) and sotd doctor"


@pytest.mark.parametrize(
    ("err", "route", "config", "want"),
    [
        (
            "the daemon did not answer at ssh:boxb/boxb: root@boxb: Permission denied (publickey). timed out",
            "ssh:boxb/boxb",
            "",
            "ssh refused this box's key (it will not fix itself): on boxa: ssh -G boxb | grep -i '^identityfile' "
            "names the keys ssh offers; on boxb: append the .pub line of one of them to ~/.ssh/authorized_keys "
            f"of the user the route logs in as; check on boxa: ssh boxb true; {RETRY}",
        ),
        (
            "the daemon did not answer at ssh:boxb/boxb: Host key verification failed. timed out",
            "ssh:boxb/boxb",
            "/etc/sot/ssh_config",
            "ssh does not trust boxb's host key (changed or never accepted): on boxb: ssh-keygen -lf "
            "/etc/ssh/ssh_host_ed25519_key.pub (its fingerprint); on boxa: ssh-keygen -R $(ssh -F "
            "/etc/sot/ssh_config -G boxb | awk '/^hostname /{print $2}'), then ssh -F /etc/sot/ssh_config boxb "
            f"true and accept the key only if ssh shows that fingerprint; {RETRY}",
        ),
        (
            "the daemon did not answer at ssh:boxb/boxb: ssh: connect to host 10.0.0.2 port 22: Connection "
            "refused",
            "ssh:boxb/boxb",
            "",
            f"nothing listens for ssh on boxb: on boxb: systemctl start ssh (or start its sshd); {RETRY}",
        ),
        (
            "the daemon did not answer at ssh:boxb/boxb: ssh: connect to host 10.0.0.2 port 22: Connection "
            "timed out",
            "ssh:boxb/boxb",
            "",
            "the network between boxa and boxb does not carry ssh: on boxa: ssh -v boxb true shows where it "
            f"stops (a firewall, a route, the box down); {RETRY}",
        ),
        (
            "the daemon did not answer at ssh:boxz/boxz: ssh: Could not resolve hostname boxz: Name or service "
            "not known",
            "ssh:boxz/boxz",
            "",
            "on boxa: boxz is no host name ssh knows: fix [boxes.boxb] ssh in hosts.toml or a Host entry in "
            "~/.ssh/config; then: sotd daemon reload",
        ),
        (
            "the daemon did not answer at ssh:boxb/boxb: bash: line 1: exec: sotd: not found",
            "ssh:boxb/boxb",
            "",
            "on boxb: sotd is not on the PATH of a non-login ssh command (docs/deploy.md, step 1); check on "
            "boxa: ssh boxb sotd --version",
        ),
        (
            "the daemon did not answer at ssh:boxb/boxb: sotd stdio-bridge: no daemon socket at /run/s (No "
            "such file or directory)",
            "ssh:boxb/boxb",
            "",
            f"on boxb: sotd daemon start (its daemon is down); {RETRY}",
        ),
        (  # a unix route: ssh's words cannot be in it
            "the daemon did not answer at unix:/r/s: Connection refused",
            "unix:/r/s",
            "",
            "on boxb: sotd daemon start (and check the route: sotd doctor on boxb)",
        ),
        (
            "hello refused: protocol_mismatch",
            "ssh:boxb/boxb",
            "",
            "on boxb: sotd daemon start (and check the route: sotd doctor on boxb)",
        ),
    ],
)
def test_link_fix_table(err: str, route: str, config: str, want: str) -> None:
    assert daemon_checks.link_fix(err, "boxb", "boxa", route, config) == want


def test_the_hub_asking_a_guest_does_not_reload_a_link_it_does_not_hold() -> None:
    err = "the daemon did not answer at ssh:boxb/boxb: sotd stdio-bridge: no daemon socket at /run/s"
    assert daemon_checks.link_fix(err, "boxb", "boxa", "ssh:boxb/boxb", "", dials=False) == (
        "on boxb: sotd daemon start (its daemon is down); then on boxa: sotd doctor"
    )


@pytest.mark.parametrize(
    ("far", "want"),
    [
        ({"topology_hub": "boxa"}, ""),
        ({"host": "boxb"}, ""),  # an older sotd does not say: nothing is claimed
        (None, ""),
        ({"topology_hub": "boxc"}, "boxb's hosts.toml names boxc as the hub; this box's names boxa"),
        ({"topology_hub": ""}, "boxb's hosts.toml names no hub (it has none); this box's names boxa"),
        (
            {"topology_hub": "", "topology_error": "line 1: bad"},
            "boxb's hosts.toml cannot be read (line 1: bad); this box's names boxa as the hub",
        ),
    ],
)
def test_hub_disagreement_table(far: object, want: str) -> None:
    assert daemon_checks.hub_disagreement("boxa", "boxb", far) == want


@pytest.mark.parametrize(
    ("holder_host", "verdict", "age", "want_what", "want_fix"),
    [
        (
            "boxb",
            "UNPROVABLE",
            3 * 3600 + 5 * 60,
            "the registry lock /c/registry.lock has been held for 3h05m by boxb pid 42 (it is on another machine)",
            "on boxb: ps -p 42 -o pid,etime,args; if it is gone there: sotd doctor --fix on boxb (that box can "
            "prove its death; this one cannot)",
        ),
        (
            "boxa",
            "ALIVE",
            75.0,
            "the registry lock /c/registry.lock has been held for 75s by boxa pid 42 (it is on another machine)",
            "on this box: ps -p 42 -o pid,etime,args (a stuck sot-comm command: kill 42)",
        ),
    ],
)
def test_a_registry_lock_held_long_is_a_problem(
    holder_host: str, verdict: str, age: float, want_what: str, want_fix: str
) -> None:
    """Issue 27: a lock held for hours by a holder on another machine was reported ok."""
    f = folder_checks.held_long_finding(
        "/c/registry.lock",
        holder_host,
        42,
        "it is on another machine",
        age_s=age,
        verdict=verdict,
        here="boxa",
    )
    assert (f.code, f.what, f.fix) == ("registry_lock_held_long", want_what, want_fix)
