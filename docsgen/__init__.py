"""The documentation's generated parts, read from the code while ``make docs`` builds the site.

- ``parsers``: the command lines' parsers, built as each program builds them (never read off
  ``--help``): the reference pages and ``tests/docs`` walk them.
- ``cli_pages``: every flag of every program, with its default and its environment variable.
- ``metric_pages``: every metric family an idle proxy exports, with its type, help and labels.
- ``error_pages``: the proxy's error answers (its one table) and every one-line message the
  entry points print on purpose, found in their source.
- ``monitoring_pages``: the Prometheus alerts and the Grafana dashboard's panels, from their files.
- ``mirror``: the repository's own files the site shows (SECURITY.md, CHANGELOG.md, the other
  READMEs, figures), at their repository paths, so a link written for GitHub works in the site.
- ``hooks``: the mkdocs hook (``mkdocs.yml``'s ``hooks:``) that puts all of the above into the
  build. Nothing generated is committed.

Runs in the core venv: the proxy, the entry points' parsers and deploy import neither torch nor
vLLM, TRL or PEFT.
"""
