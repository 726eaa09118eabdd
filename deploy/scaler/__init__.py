"""The fleet sizes itself: replicas added and retired during a run from what limits it, within a
replica range and a budget.

``decide`` is the pure decider (the figures of the last window and the fleet's history in, a
decision out): the run's own loop in the trainer job and the fleet simulator's elastic study
(``benchmarks.fleet``) call the same function. Standard library only, so both can import it.
"""
