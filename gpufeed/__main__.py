"""``python -m gpufeed`` is the ``gpufeed`` command."""

from gpufeed.cli import main

raise SystemExit(main())
