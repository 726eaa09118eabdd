"""Micro-benchmarks of the proxy's own code in one process, no sockets: the routing policy's
cost per decision and memory, and the body reader on worst-case request shapes."""
