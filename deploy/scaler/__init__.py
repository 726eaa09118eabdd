"""The fleet sizes itself: replicas added and retired during a run from what limits it, within a
replica range and a budget.

``decide`` is the pure decider (the figures of the last window and the fleet's history in, a
decision out): the run's own loop in the trainer job and the fleet simulator's elastic study
(``benchmarks.fleet``) call the same function. Around it, the actuator that runs in the trainer
job: ``config`` (what ``deploy up`` tells it, in the job's environment), ``fleet`` (the run's
replica jobs joined to the proxy's replicas, pure), ``guard`` (the bounds it keeps whatever the
decider says, and which replica a retire takes, pure), ``actuator`` (a pass: observe, adopt,
carry launches and drains on, decide, act, tell), ``report`` (a decision as the log and the
proxy are told it), ``state`` (what it remembers, in the bucket), ``proxy_calls`` (the proxy's
status and admin API), ``runner`` (built from the job's environment, run in a thread).

Standard library and huggingface_hub only (and ``deploy``'s own modules that are), so the
trainer image and the simulator can import it: ``tests/deploy/test_scaler_parts.py`` holds it.
"""
