"""The simulated vLLM replica: vLLM's HTTP contract with a prefix-cache and latency model.

Public API: ``SimSettings``, ``Faults``, ``build_sim_app(settings)`` and ``SIM_STATE`` (the
``AppKey`` of the state object, for in-process tests: ``app[SIM_STATE].records``).
"""

from replica_entry.sim.app import build_sim_app
from replica_entry.sim.settings import Faults, SimSettings
from replica_entry.sim.state import SIM_STATE, SimState

__all__ = ["SIM_STATE", "Faults", "SimSettings", "SimState", "build_sim_app"]
