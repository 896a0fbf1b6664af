"""``python -m teamrl``: the ``teamrl`` command line."""

import sys

from teamrl.cli import main

sys.exit(main())
