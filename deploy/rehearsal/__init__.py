"""``python -m deploy rehearse``: a run's exact jobs on this machine, before any money is spent.

Every job of the plan ``deploy up`` would launch runs here, its command as planned (install step
included), in an environment made like its image (``images``), in a network namespace of its own
joined to the run's network group (``network``: the aliases resolve as HF Jobs resolves them),
with the bucket as a local folder bind-mounted at the plan's path in a private mount namespace
(``jobs``, ``machine``). What cannot be the same here is substituted, and every substitution is
printed (``run``, ``stand_ins``): a local tiny model and dataset for the Hub's, the CPU's vLLM
flags (or the simulated replica), a few training steps. The Hub the jobs see is the rehearsal's
bridge (``bridge``): the Jobs API, answered from the rehearsal's jobs, starting new ones with the
rehearsal's own starter (``starter``) into its group. Rehearsals at once are private to each
other: each names its namespaces by an id of its own and mounts only inside its jobs' mount
namespaces, making nothing on this machine outside its work folder. Linux only, as root
(namespaces and bind mounts).
"""
