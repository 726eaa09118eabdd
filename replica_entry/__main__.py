"""``python -m replica_entry``: run the replica command line."""

from replica_entry.cli import main

raise SystemExit(main())
