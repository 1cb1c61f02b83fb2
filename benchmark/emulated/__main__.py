"""``python -m benchmark.emulated``: one rank of an emulated run (torchrun-compatible)."""

import sys

from benchmark.emulated.entry import main

sys.exit(main())
