"""Adapter fleet-sync on loopback against simulated replicas: the mount path under lag
(``mount``) and the push to replica receivers against it (``push``)."""
