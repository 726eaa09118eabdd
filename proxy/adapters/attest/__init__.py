"""Attesting the served policy: does a replica sample the policy the trainer trained?

``probe`` (the fixed token sequence, a replica's answer to it, the tolerance), ``judge`` (the
comparative evidence without a trainer's reference: pure), ``check`` (the fleet-wide check each
replica's agent asks after a load, and what routing may use), ``verdict`` (the one vocabulary
they speak). Nothing here is on the request path: routing reads what the agents publish.
"""
