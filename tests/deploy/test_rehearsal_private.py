"""Rehearsals at once are private to each other (issue 48): each names its namespaces and links by
an id of its own and deletes only those, and each job's bucket mount lives in a file system of
its own. The naming and cleanup run against a stand-in ``ip`` (``FakeHost``); the file systems
as the steps ``machine`` plans (``tests/e2e/test_rehearsal.py`` runs two rehearsals at once)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import pytest

from deploy.errors import DeployError
from deploy.rehearsal.machine import Entry, Machine, script, steps
from deploy.rehearsal.network import Group, free_ids, owner_of
from deploy.rehearsal.run import failed
from deploy.specs import BucketMount


class FakeHost:
    """The ``ip`` commands a group runs, on a machine of links, namespaces and addresses."""

    def __init__(self, links: Sequence[str] = (), netns: Sequence[str] = (), addr: str = ""):
        self.links, self.netns, self.addr = set(links), set(netns), addr
        self.taken_meanwhile: set[str] = set()  # claimed by another group after our look
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.calls.append(argv)
        out, err, code = "", "", 0
        match argv[1:]:
            case ["-o", "-4", "addr"]:
                out = self.addr
            case ["-o", "link"]:
                out = "".join(f"{i}: {name}: <UP>\n" for i, name in enumerate(sorted(self.links)))
            case ["netns", "list"]:
                out = "".join(f"{name} (id: 0)\n" for name in sorted(self.netns))
            case ["link", "add", name, *rest]:
                if name in self.links or name in self.taken_meanwhile:
                    err, code = "RTNETLINK answers: File exists", 2
                else:
                    self.links |= {name, *(rest[-1:] if "peer" in rest else [])}
            case ["netns", "add", name]:
                self.netns.add(name)
            case ["netns", "del", name]:
                self.netns.discard(name)
            case ["link", "del", name]:
                self.links -= {name, name.replace("h", "j")}  # a veth pair goes together
        return subprocess.CompletedProcess(argv, code, out, err)


def _group(host: FakeHost, tmp_path: Path, name: str = "math-r1") -> Group:
    return Group(name, tmp_path / f"{name}.hosts", call=host)


def test_ids_name_everything_a_group_makes_and_skip_what_this_machine_uses() -> None:
    assert owner_of("rp0abr") == owner_of("rp0an2") == owner_of("rp0ah13") == 10
    assert owner_of("rp0aj2") == 10 and owner_of("eth0") is None and owner_of("rp0a1fbr") is None
    addresses = "3: eth1    inet 10.231.3.1/24 brd 10.231.3.255 scope global eth1\n"
    names = ["eth0", "rp05br", "rp07n4"]  # another rehearsal's bridge, a killed one's namespace
    assert free_ids([3, 5, 7, 9, 11], addresses, names) == [9, 11]


def test_a_group_claims_a_free_id_and_names_its_bridge_namespaces_and_links_by_it(
    tmp_path: Path,
) -> None:
    host = FakeHost(links=["lo", "rp05br"], netns=["rp07n2"])
    group = _group(host, tmp_path)
    group.open(order=[5, 7, 9, 11])
    first, second = group.join("math-r1-replica-0", ("replica",)), group.join("math-r1-t", ())
    assert (group.tag, group.bridge, str(group.subnet)) == ("rp09", "rp09br", "10.231.9.0/24")
    assert (first.netns, first.address, second.netns) == ("rp09n2", "10.231.9.2", "rp09n3")
    assert group.prefix == "math-r1-09-"
    made = {*host.links, *host.netns} - {"lo", "rp05br", "rp07n2"}
    assert made == {"rp09br", "rp09h2", "rp09j2", "rp09h3", "rp09j3", "rp09n2", "rp09n3"}
    assert all(group.owns(name) for name in made) and not group.owns("rp05br")


def test_two_groups_opening_at_once_never_share_an_id(tmp_path: Path) -> None:
    """Both looked before either claimed: the loser's ``ip link add`` meets the winner's bridge
    (File exists) and it claims the next free id instead."""
    host = FakeHost()
    host.taken_meanwhile = {"rp05br"}
    group = _group(host, tmp_path)
    group.open(order=[5, 6])
    assert group.bridge == "rp06br"
    other = _group(host, tmp_path, "math-r2")
    other.open(order=[6, 7])  # rp06br exists now: skipped without a try
    assert other.bridge == "rp07br"
    assert ["ip", "link", "add", "rp06br", "type", "bridge"] not in host.calls[-6:]


def test_closing_deletes_this_groups_namespaces_and_links_and_nothing_else(
    tmp_path: Path,
) -> None:
    host = FakeHost()
    mine, theirs = _group(host, tmp_path), _group(host, tmp_path, "sweep")
    mine.open(order=[1])
    theirs.open(order=[2])
    for group in (mine, theirs):
        group.join(f"{group.name}-replica-0", ("replica",))
    mine.close()
    assert {*host.links, *host.netns} == {"rp02br", "rp02h2", "rp02j2", "rp02n2"}
    deleted = [argv[-1] for argv in host.calls if argv[-2:-1] == ["del"]]
    assert deleted == ["rp01n2", "rp01h2", "rp01br"]  # the bridge last
    mine.close()  # again: nothing of its own is left, and nothing else is touched
    assert {*host.links, *host.netns} == {"rp02br", "rp02h2", "rp02j2", "rp02n2"}


def test_a_refused_claim_or_no_free_id_stops_the_rehearsal_in_one_line(tmp_path: Path) -> None:
    def no_root(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        fails = list(argv[:3]) == ["ip", "link", "add"]
        said = "RTNETLINK answers: Operation not permitted" if fails else ""
        return subprocess.CompletedProcess(list(argv), int(fails), "", said)

    with pytest.raises(DeployError, match=r"rp03br type bridge` failed \(RTNETLINK answers: "):
        Group("r", tmp_path / "h", call=no_root).open(order=[3])
    full = FakeHost(links=[f"rp{i:02x}br" for i in range(4)])
    with pytest.raises(DeployError) as refused:
        _group(full, tmp_path).open(order=range(4))
    assert "\n" not in str(refused.value) and "`ip netns del NAME`" in str(refused.value)


LISTING = {
    "/": (
        Entry("bin", "link", "usr/bin"),
        Entry("data", "dir"),
        Entry("etc", "dir"),
        Entry("lora", "dir"),  # this machine's own /lora: never touched, never shown
        Entry("tmp", "dir"),
        Entry("var", "dir"),
        Entry(".dockerenv", "other"),
    ),
    "/data": (Entry("lora", "dir"), Entry("sets", "dir")),
}


def _machine(mount_path: str, read_only: bool = False) -> Machine:
    work = Path("/var/tmp/rehearse-1")
    return Machine(
        name="math-r1-trainer", root=work / "roots" / "math-r1-trainer",
        mount=BucketMount("org/b", mount_path, read_only), bucket_dir=work / "bucket",
        hosts_file=work / "hosts", tmp=work / "tmp" / "math-r1-trainer",
        started=work / "started" / "math-r1-trainer", chroot="/usr/sbin/chroot",
        keep=(Path("/tmp/base-env/site"), Path("/opt/base")),
    )  # fmt: skip


def _targets(made: list[tuple[str, ...]]) -> list[str]:
    """What each step creates or mounts on (its last argument; ``umount``: what it removes)."""
    return [step[-1] for step in made if step[0] in ("mkdir", "touch", "ln", "mount", "umount")]


@pytest.mark.parametrize("mount_path", ["/lora", "/data/lora", "/new/deep/lora", "/tmp/b"])
def test_a_jobs_file_system_is_made_under_its_root_and_nothing_on_this_machine(
    mount_path: str,
) -> None:
    machine = _machine(mount_path)
    made = steps(machine, {k: v for k, v in LISTING.items() if k in dict(machine.levels)})
    root, tmp = str(machine.root), str(machine.tmp)
    assert all(target.startswith((root + "/", tmp + "/")) or target == root
               for target in _targets(made))  # fmt: skip
    inside = machine.inside(mount_path)
    assert ("mount", "--bind", str(machine.bucket_dir), inside) in made
    assert made.index(("mkdir", "-p", inside)) < made.index(
        ("mount", "--bind", str(machine.bucket_dir), inside)
    )
    # This machine's entries are the job's (folders with their mounts, files, links) except the
    # mount path's own name and /tmp (the job's own, bound after the copy of the root is gone).
    assert ("ln", "-s", "usr/bin", f"{root}/bin") in made
    assert ("mount", "--rbind", "/var", f"{root}/var") in made
    assert ("mount", "--bind", "/.dockerenv", f"{root}/.dockerenv") in made
    top = "/" + PurePosixPath(mount_path).parts[1]  # the mount path's own, or the job's /tmp
    assert not any(step[:3] == ("mount", "--rbind", top) for step in made)
    assert not any(step[:3] == ("mount", "--rbind", "/tmp") for step in made)
    umount = made.index(("umount", "--lazy", root + root))  # the loop the /var binding brought
    assert made.index(("mount", "--rbind", tmp, f"{root}/tmp")) > umount
    assert ("mount", "--bind", "/var/tmp/rehearse-1/hosts", f"{root}/etc/hosts") in made
    # A base environment under /tmp is carried into the job's own; one elsewhere is just seen.
    assert made[1] == ("mount", "--bind", "/tmp/base-env/site", f"{tmp}/base-env/site")
    assert not any("/opt/base" in step for step in made)


def test_folders_above_the_mount_path_are_shadowed_or_made_one_level_at_a_time() -> None:
    machine = _machine("/data/lora")
    assert machine.levels == [("/", "data"), ("/data", "lora")]
    made = steps(machine, LISTING)
    root = str(machine.root)
    assert ("mount", "--rbind", "/data", f"{root}/data") not in made  # shadowed instead:
    assert ("mount", "-t", "tmpfs", "-o", "mode=0755", "rehearsal-root", f"{root}/data") in made
    assert ("mount", "--rbind", "/data/sets", f"{root}/data/sets") in made
    assert ("mount", "--rbind", "/data/lora", f"{root}/data/lora") not in made
    lacking = steps(_machine("/new/deep/lora"), LISTING)  # /new: made in the tmpfs, no listing
    assert ("mkdir", f"{root}/new") in lacking and ("mkdir", f"{root}/new/deep") in lacking
    assert not any(step[-1] == f"{root}/new" and step[1] == "-t" for step in lacking)
    assert _machine("/tmp/b").levels == [("/", "")]


def test_a_read_only_bucket_is_remounted_read_only_and_the_command_runs_after_a_marker() -> None:
    machine = _machine("/lora", read_only=True)
    made = steps(machine, LISTING)
    assert made[-1] == ("mount", "-o", "remount,bind,ro", machine.inside("/lora"))
    text = script(machine, LISTING)
    assert text.startswith("hostname math-r1-trainer && ")
    assert text.endswith(
        f'&& exec /usr/sbin/chroot {machine.root} sh -c \'cd / && : > "$0" && exec "$@"\' '
        f'{machine.started} "$@"'
    )
    assert machine.inside(PurePosixPath("/etc/hosts")) == f"{machine.root}/etc/hosts"


def test_a_failure_says_what_the_rehearsal_saw_and_nothing_of_a_real_launch() -> None:
    log = Path("/w/logs/math-r1-trainer.log")
    ran = str(failed("math-r1-trainer", "exited with code 1", ["boom"], log))
    assert ran.startswith("rehearsal failed: math-r1-trainer exited with code 1; the last lines")
    assert "  | boom\n" in ran and f"all of it: {log}." in ran and "stand-ins" in ran
    unmade = str(failed("math-r1-trainer", "exited with code 32", ["mount: /r/lora: mount "
                        "point does not exist."], log, command_ran=False))  # fmt: skip
    assert "exited with code 32 before its command began" in unmade
    assert "may make mount namespaces, tmpfs and bind mounts" in unmade
    for said in (ran, unmade):
        assert "real launch" not in said and "the same way" not in said
        assert said.rstrip().endswith("then rehearse again")
