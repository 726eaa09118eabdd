"""rollout-proxy: one URL in front of N vLLM replicas, for TRL's AsyncGRPOTrainer with LoRA.

Rooms, from the edge inwards (each package's docstring says what it holds and may import):

- ``http``: the edge (routes, handlers, admin, auth, every answer the proxy builds itself);
- ``dataplane``: client traffic to replicas (forward, limiter, fan-out, usage);
- ``adapters``: keeping every replica on the policy versions TRL asks for;
- ``fleet``: the replicas and their one owner (pool), health, outliers, sync, views, discovery;
- ``routing``: pure policies that choose a replica;
- ``upstream``: talking to replicas (parser, keep-alive connections, control-plane client);
- ``metrics``: what is exported to Prometheus;
- ``insight``: the bottleneck advisor and the samples it judges;
- ``console``: ``rollout-proxy top``, a terminal client of a running proxy.

At the top: ``cli`` and ``app`` (composition), ``config``, ``clock``, ``logs``, ``supervise``
and ``lifeline``. Imports point inwards only, layer by layer (pyproject.toml's import-linter
contracts, which place every module): cli -> app -> http -> logs | supervise | insight |
console -> lifeline -> dataplane | adapters -> metrics -> fleet -> upstream -> clock | config ->
routing, where ``a | b`` share a layer and import neither each other; no package has an import
cycle. The proxy never imports torch, vLLM, TRL or PEFT.

Objects made per request (a body's ``Peek``; the routing ``RouteRequest``, ``Snapshot`` and
``Decision``; the limiter's ``Placement``; the forward's ``Identity`` and exchange) are
``@dataclass(slots=True)`` but not ``frozen``: a frozen dataclass's ``__init__`` sets each field
through ``object.__setattr__``, ~0.25 us a field (CPython 3.11), on the measured request path.
Their ``# made per request: not frozen`` comments point here.

``__version__`` is the installed distribution's version, one source (pyproject.toml) for every
program's ``--version``, ``/proxy/status`` and the ``rollout_proxy_build_info`` gauge.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rollout-proxy")
except PackageNotFoundError:  # pragma: no cover - run from a source tree never installed
    __version__ = "0+unknown"
