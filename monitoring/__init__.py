"""Monitoring assets: the Grafana dashboard (built by ``dashboard.py``), Prometheus scrape config,
alert rules and their unit tests. Not part of the installed package."""
