"""Routing in simulated time, no sockets: the routing-quality simulator and the published
``learned_blocks`` baseline it (and ``benchmarks.fleet``) compares the policies against."""
