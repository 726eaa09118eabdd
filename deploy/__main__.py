"""``python -m deploy``: see ``deploy.cli``."""

from deploy.cli import main

raise SystemExit(main())
