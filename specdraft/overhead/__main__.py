"""``python -m specdraft.overhead``: the same as ``specdraft overhead``."""

import sys

from specdraft.overhead.command import main

sys.exit(main())
