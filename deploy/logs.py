"""``deploy logs``: the logs of a run's jobs, each line prefixed with its job's name.

Without ``--follow`` the jobs are printed one after the other. With it, each job is streamed by
its own thread (the client's log stream blocks) until every selected job has ended or Ctrl-C.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from deploy.jobs import HUB_ERRORS, HubJobs, JobView


def print_logs(
    jobs: HubJobs,
    selected: Sequence[JobView],
    say: Callable[[str], None],
    *,
    follow: bool,
    tail: int | None,
) -> None:
    if not follow:
        for view in selected:
            say(f"== {view.name} (job {view.id}, {view.stage}) ==")
            _stream(jobs, view, say, follow=False, tail=tail)
        return
    lock = threading.Lock()

    def locked_say(line: str) -> None:
        with lock:
            say(line)

    threads = [
        threading.Thread(
            target=_stream,
            args=(jobs, view, locked_say),
            kwargs={"follow": True, "tail": tail},
            name=f"logs-{view.name}",
            daemon=True,
        )
        for view in selected
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(timeout=0.5)


def _stream(
    jobs: HubJobs, view: JobView, say: Callable[[str], None], *, follow: bool, tail: int | None
) -> None:
    try:
        for line in jobs.logs(view.id, follow=follow, tail=tail):
            say(f"[{view.name}] {line}")
    except HUB_ERRORS as exc:
        say(f"[{view.name}] (logs unavailable: {exc})")
