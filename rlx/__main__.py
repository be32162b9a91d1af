"""``python -m rlx``: the same as the ``rlx`` command."""

from rlx.run.cli import main

raise SystemExit(main())
