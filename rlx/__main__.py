"""``python -m rlx``: the same as the ``rlx`` command."""

from rlx.cli import main

raise SystemExit(main())
