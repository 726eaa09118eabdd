"""``python -m trainer_entry``: run the trainer command line."""

from trainer_entry.cli import main

raise SystemExit(main())
