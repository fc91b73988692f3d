"""``python -m specdraft.workloads``."""

import sys

from specdraft.workloads.cli import main

sys.exit(main())
