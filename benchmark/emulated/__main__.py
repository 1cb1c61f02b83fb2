"""``python -m decobench.emulated``: one rank of an emulated run (torchrun-compatible)."""

import sys

from decobench.emulated.entry import main

sys.exit(main())
